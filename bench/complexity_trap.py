"""The Complexity Trap's two strategies, written from the paper and its code.

Source: Lindenbauer, Slinko, Felder, Bogomolov, Zharov, "The Complexity Trap: Simple
Observation Masking Is as Efficient as LLM Summarization for Agent Context Management"
(NeurIPS 2025 DL4Code workshop, arXiv 2508.21433), code at
github.com/JetBrains-Research/the-complexity-trap, a fork of SWE-agent, read here in the
copy Recursive-Safeguarding/the-complexity-trap @ adfaa1a18b8b3500abb7537101b2bdcefa31f22a:
`sweagent/agent/history_processors.py` (`LastNObservations`, `SummarizeEveryNTurns`) and
the configurations `config/default_no_demo_N=1_M=10.yaml` (masking) and
`config/default_no_demo_checkpoint_same_model_openhands_N=43_M=10_masking_M=10.yaml`
(hybrid), whose `summary_system_template` is the summarizer's prompt below.

- Observation masking (paper, section 3.1 and eq. 3): the reasoning and actions stay
  whole; the observation of every turn older than the newest M = 10 is replaced by a
  placeholder, the text `LastNObservations` writes: "Old environment output: (N lines
  omitted)". The mask rolls one turn further at each turn (`polling` 1, the default).
- Hybrid (section 5.3): `SummarizeEveryNTurns` with N = 43, keep_last_m_turns M = 10 and
  static checkpointing, then masking with W = 10 on what it returns. When the turns not
  yet summarized reach N + M, the oldest N of them go to the summarizer, unmasked ("we
  pass the unmasked context whenever summarizing"), with the previous checkpoint (or,
  the first time, the problem statement); the request is then the system prompt, the
  task, one assistant message "Checkpoint for the last 43 turns:" with the summary, and
  the turns not summarized. With static checkpointing only the newest checkpoint is
  sent: the paper's request (eq. 5) and the fork's later fix; the code at adfaa1a
  re-sends every older one between two summaries.

How the bench maps SWE-agent's history onto these sessions: SWE-agent has one user
message (the task) and one tool call per turn, so a turn is an assistant message and its
observation. Here an assistant message may call several tools at once and the user may
speak again: a turn is an assistant message and everything up to the next one (its
tool results, a user message), the messages before the first assistant message are the
task, and a turn's observation is all of its tool results. So a call always travels
with its results. The summarizer's input is the prompt, the context (the problem
statement, or the previous checkpoint as the fake's previous summary) and the turns as
a transcript; it is priced at 1.0x, as every summarizer's input.
"""

from __future__ import annotations

from typing import Any

from assistant.providers.summary_prompt import render_transcript
from bench.fake_summarizer import FakeSummarizer
from bench.sessions import HYBRID, MASKING
from bench.strategies import Request, Strategy

WINDOW = 10  # M: the turns whose observations stay whole (W in the hybrid)
SUMMARIZE_TURNS = 43  # N: the turns one summary folds in (the hybrid's)
KEEP_TURNS = 10  # M: the newest turns the summarizer leaves alone (the hybrid's)
SUMMARY_PROMPT = """You are maintaining a context-aware state summary for an interactive \
agent. You will be given a list of events corresponding to actions taken by the agent, and \
the most recent previous summary if one exists. Track:

USER_CONTEXT: (Preserve essential user requirements, goals, and clarifications in concise form)

COMPLETED: (Tasks completed so far, with brief results)
PENDING: (Tasks that still need to be done)
CURRENT_STATE: (Current variables, data structures, or relevant state)

For code-specific tasks, also include:
CODE_STATE: (File paths, function signatures, data structures)
TESTS: (Failing cases, error messages, outputs)
CHANGES: (Code edits, variable updates)
DEPS: (Dependencies, imports, external calls)
VERSION_CONTROL_STATUS: (Repository state, current branch, PR status, commit history)

PRIORITIZE:
1. Adapt tracking format to match the actual task type
2. Capture key user requirements and goals
3. Distinguish between completed and pending tasks
4. Keep all sections concise and relevant

SKIP: Tracking irrelevant details for the current task type

Example formats:

For code tasks:
USER_CONTEXT: Fix FITS card float representation issue
COMPLETED: Modified mod_float() in card.py, all tests passing
PENDING: Create PR, update documentation
CODE_STATE: mod_float() in card.py updated
TESTS: test_format() passed
CHANGES: str(val) replaces f"{val:.16G}"
DEPS: None modified
VERSION_CONTROL_STATUS: Branch: fix-float-precision, Latest commit: a1b2c3d"""


def placeholder(text: str) -> str:
    """What `LastNObservations` puts in place of an old observation."""
    return f"Old environment output: ({len(text.splitlines())} lines omitted)"


def old_results(history: list[dict[str, Any]], indices: list[int], window: int) -> set[int]:
    """The indices (of `indices`, in order) of the tool results of every turn older than
    the newest `window` turns that have results; a result belongs to the turn of the
    assistant message before it."""
    owner = -1
    owners: list[int] = []
    results: list[tuple[int, int]] = []
    for index in indices:
        role = history[index]["role"]
        if role == "assistant":
            owner = index
        elif role == "tool" and owner >= 0:
            if not owners or owners[-1] != owner:
                owners.append(owner)
            results.append((index, owner))
    if len(owners) <= window:
        return set()
    newest = owners[-window]
    return {index for index, turn in results if turn < newest}


class ObservationMasking(Strategy):
    """Every tool result of a turn older than the newest `window` turns with results is
    sent as its placeholder; nothing else changes."""

    name = MASKING

    def __init__(self, system: str, window: int = WINDOW) -> None:
        self.system, self.window = system, window
        self._masked: dict[int, dict[str, Any]] = {}  # history index -> its masked form, reused

    def request(self, history: list[dict[str, Any]]) -> Request:
        return Request(self.system, [], self.masked(history, list(range(len(history)))))

    def masked(self, history: list[dict[str, Any]], indices: list[int]) -> list[dict[str, Any]]:
        """history[i] for each of `indices`, the old results masked."""
        old = old_results(history, indices, self.window)
        return [self._mask(i, history[i]) if i in old else history[i] for i in indices]

    def _mask(self, index: int, message: dict[str, Any]) -> dict[str, Any]:
        if index not in self._masked:
            self._masked[index] = {**message, "content": placeholder(message["content"])}
        return self._masked[index]


class Hybrid(ObservationMasking):
    """Summarize the oldest `summarize` turns once `summarize + keep` turns wait, then
    mask the results of all but the newest `window` turns of what is sent."""

    name = HYBRID

    def __init__(
        self,
        system: str,
        summarizer: FakeSummarizer,
        summarize: int = SUMMARIZE_TURNS,
        keep: int = KEEP_TURNS,
        window: int = WINDOW,
    ) -> None:
        super().__init__(system, window)
        self.summarizer, self.summarize, self.keep = summarizer, summarize, keep
        self.checkpoint: dict[str, Any] | None = None  # the newest, as the assistant message
        self.summarized = 0  # turns folded into the checkpoint
        self.summaries = 0

    def request(self, history: list[dict[str, Any]]) -> Request:
        starts = [i for i, m in enumerate(history) if m["role"] == "assistant"]
        head = list(range(starts[0] if starts else len(history)))
        waiting = starts[self.summarized :]
        if len(waiting) >= self.summarize + self.keep:
            self._checkpoint(history, head, waiting[0], waiting[self.summarize])
        kept = starts[self.summarized] if len(starts) > self.summarized else len(history)
        indices = head + list(range(kept, len(history)))
        messages = self.masked(history, indices)
        if self.checkpoint is not None:
            messages.insert(len(head), self.checkpoint)
        return Request(self.system, [], messages)

    def _checkpoint(
        self, history: list[dict[str, Any]], head: list[int], start: int, end: int
    ) -> None:
        """The turns history[start:end] folded into a new checkpoint, with the previous one
        (or the task) as the summarizer's context."""
        previous = self.checkpoint["content"] if self.checkpoint else None
        context = ""
        if previous is None:
            task = "\n".join(history[i]["content"] for i in head)
            context = f"<PROBLEM_STATEMENT>\n{task}\n</PROBLEM_STATEMENT>\n"
        text, _, _ = self.summarizer.summarize_text(
            context + render_transcript(history[start:end]),
            previous_summary=previous,
            instructions=SUMMARY_PROMPT,
            kind="checkpoint",
        )
        self.checkpoint = {
            "role": "assistant",
            "content": f"Checkpoint for the last {self.summarize} turns:\n{text}",
        }
        self.summarized += self.summarize
        self.summaries += 1
