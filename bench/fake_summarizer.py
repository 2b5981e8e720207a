"""A stand-in for the summary model: counts its calls and tokens, sized like an LLM.

How it is built (and why it does not flatter our strategy):

- Tokens are counted with `count_tokens`, a tokenizer-like count (one token per
  punctuation mark, one per four letters or digits of a word), not with the
  chars/4 heuristic the product uses for estimates: HTML and tables cost more
  tokens than chars/4 says, as they do with a real tokenizer. Every figure
  of the benchmark (ours and the baselines) uses this count.
- Input tokens are the whole prompt a real call would send: the product's own
  instructions, the previous summary and the transcript.
- Output size grows sublinearly with input, like a real summary:
  min(2,000, 200 + 10% of the transcript + 80% of the previous summary)
  tokens (an update keeps most of what it merges). The text is made of the
  section headings the product asks for, the planted facts the input holds
  (copied verbatim, as the prompt tells a model to), and filler words taken
  from the input, so a summary costs the chat model what a real one would.
- It knows nothing the input does not hold: a fact is kept only as the
  sentence it was planted in, and only when that sentence is whole in the
  transcript or the previous summary (a value without its sentence, or a
  sentence cut in two, is lost). Facts are kept in order of appearance; when
  they do not fit in the output cap (2,048 tokens, SUMMARY_MAX_OUTPUT_TOKENS)
  the oldest are dropped.
- `lossy=True` drops one fact in five at each call, decided by a hash of the
  fact and of the call's input: a fact that survives one update can be lost at
  the next, as with a real model that re-writes its summary.
- It never reads identifiers that are not in a fact sentence, and it never
  invents anything: whatever our engine carries forward beyond the model's
  output, it does in its own code, which the benchmark measures as it is.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from demo.workload import PLANTED_SENTENCES

_TOKEN_RE = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")
_WORD_RE = re.compile(r"[a-z]{4,}")
_CACHE: dict[str, int] = {}
_LINES: dict[str, int] = {}

OUTPUT_CAP_TOKENS = 2048
HEADINGS = ("Goal", "Constraints", "Progress", "Key decisions", "Next steps", "Critical context")


def count_tokens(text: str | None) -> int:
    """A tokenizer-like count: each punctuation mark is a token, each word one
    token per four characters. English prose comes out near 4.5 chars per
    token, HTML and Markdown tables near 3, as with real BPE tokenizers."""
    if not text:
        return 0
    cached = _CACHE.get(text)
    if cached is not None:
        return cached
    if len(text) > 20_000 and "\n" in text:
        # No token spans a line break: count (and cache) line by line, so a
        # transcript re-read many times costs little to count.
        return sum(_line_tokens(line) for line in text.split("\n"))
    total = _count(text)
    if len(text) > 200:
        if len(_CACHE) > 50_000:
            _CACHE.clear()
        _CACHE[text] = total
    return total


def _line_tokens(line: str) -> int:
    """A line of a long text, remembered whatever its length: the same lines
    come back in every transcript of a conversation."""
    tokens = _LINES.get(line)
    if tokens is None:
        if len(_LINES) > 400_000:
            _LINES.clear()
        tokens = _LINES[line] = count_tokens(line) if len(line) > 20_000 else _count(line)
    return tokens


def _count(text: str) -> int:
    total = 0
    for match in _TOKEN_RE.finditer(text):
        size = match.end() - match.start()
        total += (size + 3) // 4 if size > 1 else 1
    return total


def facts_in(text: str) -> list[str]:
    """The planted fact sentences that stand whole in `text`, in order of appearance."""
    if not text:
        return []
    found = []
    for sentence in PLANTED_SENTENCES:
        position = text.find(sentence)
        if position >= 0:
            found.append((position, sentence))
    return [sentence for _, sentence in sorted(found)]


@dataclass
class Call:
    kind: str
    input_tokens: int
    output_tokens: int


@dataclass
class FakeSummarizer:
    """Thread-safe; `calls` keeps one record per summarize() call."""

    lossy: bool = False
    latency: float = 0.0  # seconds per call, for the concurrency measure
    calls: list[Call] = field(default_factory=list)
    # The Anthropic payloads of "cached_suffix" summary requests, for the replay to
    # price against the request before them (bench.payload.CostMeter.suffix_cost).
    cached_payloads: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def totals(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter] = {}
        for call in self.calls:
            bucket = out.setdefault(call.kind, Counter())
            bucket["calls"] += 1
            bucket["input_tokens"] += call.input_tokens
            bucket["output_tokens"] += call.output_tokens
        return {kind: dict(counter) for kind, counter in out.items()}

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def summarize_text(
        self,
        transcript: str,
        *,
        previous_summary: str | None = None,
        instructions: str | None = None,
        kind: str = "window",
    ) -> tuple[str, int, int]:
        """(summary text, input tokens, output tokens)."""
        prompt_tokens = (
            count_tokens(instructions or _DEFAULT_INSTRUCTIONS)
            + count_tokens(previous_summary)
            + count_tokens(transcript)
        )
        # An update keeps most of the previous summary (the prompt asks it to),
        # so an incrementally updated summary grows to the cap like a fresh one.
        target = min(
            2000, 200 + count_tokens(transcript) // 10 + count_tokens(previous_summary) * 4 // 5
        )
        digest = hashlib.sha1(
            ((previous_summary or "") + transcript).encode("utf-8", "surrogatepass")
        ).hexdigest()
        facts = list(dict.fromkeys(facts_in(previous_summary or "") + facts_in(transcript)))
        if self.lossy:
            facts = [f for f in facts if _hash(f + digest) % 5 != 0]
        fact_tokens = [count_tokens(f) + 2 for f in facts]
        budget = OUTPUT_CAP_TOKENS - 120
        while facts and sum(fact_tokens) > budget:  # drop the oldest past the cap
            facts.pop(0)
            fact_tokens.pop(0)
        critical = "\n".join(f"- {fact}" for fact in facts) or "- none"
        # Filler from the end of the input: a summary of more messages reads
        # differently (a deterministic fake must not keep a re-read summary
        # byte-identical where a real model would rewrite it).
        words = _WORD_RE.findall(transcript[-20_000:]) or ["conversation"]
        head = (
            "## Goal\nRun the blog's editorial work as the user asks.\n"
            "## Constraints\n- none\n## Progress\n"
        )
        tail = (
            "\n## Key decisions\n- none\n## Next steps\n- Continue with the user's next request.\n"
            f"## Critical context\n{critical}"
        )
        used = count_tokens(head) + count_tokens(tail)
        filler_words = max(0, (target - used) * 4 // 7)  # ~1.75 tokens per filler word
        progress = " ".join(words[i % len(words)] for i in range(filler_words)) or "- none"
        text = f"{head}{progress}{tail}"
        output_tokens = count_tokens(text)
        if self.latency:
            time.sleep(self.latency)
        with self._lock:
            self.calls.append(Call(kind, prompt_tokens, output_tokens))
        return text, prompt_tokens, output_tokens


_DEFAULT_INSTRUCTIONS = (
    "You write the working memory of an assistant whose older messages are being removed. "
    "Write only the summary, in the six sections. " * 6
)


# The kind of a "cached_suffix" window summary in FakeSummarizer.totals().
SUFFIX = "window (cached suffix)"


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:4], "big")


def make_provider(summarizer: FakeSummarizer, kind_of: Any = None) -> Any:
    """The fake as an `assistant.providers` provider, for the engine under test.

    `kind_of(transcript, previous_summary, instructions)` names the call's kind
    ("window" or "tool_result") for the accounting."""
    from assistant.providers.base import Provider, SummaryResult, Usage

    class FakeProvider(Provider):
        name = "fake"
        model = "fake-summarizer"
        chat_model = "fake-chat"
        max_input_tokens = 200_000

        def summarize(
            self,
            transcript: str,
            *,
            previous_summary: str | None = None,
            instructions: str | None = None,
        ) -> SummaryResult:
            kind = kind_of(transcript, previous_summary, instructions) if kind_of else "window"
            text, tokens_in, tokens_out = summarizer.summarize_text(
                transcript,
                previous_summary=previous_summary,
                instructions=instructions,
                kind=kind,
            )
            return SummaryResult(
                text=text,
                usage=Usage(input_tokens=tokens_in, output_tokens=tokens_out),
                model=self.model,
                provider=self.name,
            )

        # "cached_suffix": the same information as the transcript path (the newly old
        # messages, the previous summary), so probes and facts compare; the replay
        # prices the request's shape, kept here.
        reads_prompt_cache = True

        def summarize_cached(self, request: Any) -> SummaryResult:
            summarizer.cached_payloads.append(request.anthropic())
            text, tokens_in, tokens_out = summarizer.summarize_text(
                request.transcript, previous_summary=request.previous_summary, kind=SUFFIX
            )
            return SummaryResult(
                text=text,
                usage=Usage(input_tokens=tokens_in, output_tokens=tokens_out),
                model=self.chat_model,
                provider=self.name,
            )

    return FakeProvider()
