"""Anthropic's server-side compaction, `compact_20260112`, emulated from its documentation.

Source: platform.claude.com/docs/en/build-with-claude/compaction (beta
`compact-2026-01-12`, read 2026-11-25): parameters `trigger` (default 150,000
input tokens, at least 50,000), `pause_after_compaction` (default false),
`instructions` (default null: the default summarization prompt below). "The
API: 1. Detects when input tokens exceed your specified trigger threshold.
2. Generates a summary of the current conversation. 3. Creates a compaction
block containing the summary. 4. Continues the response with the compacted
context." On later requests "the API automatically drops all message blocks
prior to the compaction block". Usage: "Compaction requires an additional
sampling step, which contributes to rate limits and billing"; its tokens are
an entry of `usage.iterations` (type "compaction", with `input_tokens`,
`cache_read_input_tokens` and `cache_creation_input_tokens`), and "to
calculate the total tokens consumed and billed for a request, sum all entries
in the `usage.iterations` array".

How the bench plays it, and what it assumes where the documentation is silent:

- Before each model call, the request's input tokens (the bench's one token
  rule: system, the compaction summary if any, the messages after it) are
  compared with the trigger; above it, the compaction iteration runs: the
  FakeSummarizer summarizes the conversation since the previous compaction
  (with that compaction's summary as its previous summary) under the
  default prompt, and the summary replaces everything before it, the newest
  messages included: the model call itself then sees the system prompt and
  the summary only (the documentation's example: 180,000 tokens in the
  compaction iteration, 23,000 in the message iteration).
- The compaction block is in the assistant's response; the bench renders it
  as a user message holding the summary at the start of the messages (the
  API's own rendering of the block is not published; the tokens are the
  same, and the request starts with a user message as the API requires of
  requests without one).
- Pricing of the compaction iteration (`summarizer_cost`): its prompt is the
  request the trigger fired on, which extends the previous request, so the
  previous request's tokens are read from the cache (0.1x, the iteration
  usage reports cache reads) and the rest (the new messages and the default
  prompt) is plain input at 1.0x (assumed: no cache write is reported for a
  prompt that is never sent again). Its output is reported beside, as for
  every summarizer.
"""

from __future__ import annotations

from typing import Any

from assistant.providers.summary_prompt import render_transcript
from bench.fake_summarizer import FakeSummarizer, count_tokens
from bench.payload import CACHE_READ, neutral_tokens
from bench.sessions import COMPACT
from bench.strategies import Request, Strategy

DEFAULT_PROMPT = (
    "You have written a partial transcript for the initial task above. Please write a summary "
    "of the transcript. The purpose of this summary is to provide continuity so you can continue "
    "to make progress towards solving the task in a future context, where the raw history above "
    "may not be accessible and will be replaced with this summary. Write down anything that "
    "would be helpful, including the state, next steps, learnings etc. You must wrap your "
    "summary in a <summary></summary> block."
)
DEFAULT_TRIGGER = 150_000
MINIMUM_TRIGGER = 50_000


class ServerCompaction(Strategy):
    def __init__(
        self, system: str, summarizer: FakeSummarizer, trigger: int = DEFAULT_TRIGGER
    ) -> None:
        if trigger < MINIMUM_TRIGGER:
            raise ValueError(f"trigger must be at least {MINIMUM_TRIGGER:,} input tokens")
        self.name = COMPACT.format(trigger=f"{trigger:,}")
        self.system, self.summarizer, self.trigger = system, summarizer, trigger
        self.start = 0  # the first history message after the newest compaction
        self.summary: dict[str, Any] | None = None  # the compaction block, as a message
        self.summarizer_cost = 0.0
        self.compactions = 0
        self._sizes: list[int] = []  # each history message's tokens
        self._previous = 0  # tokens of the previous request

    def request(self, history: list[dict[str, Any]]) -> Request:
        self._sizes.extend(neutral_tokens(m) for m in history[len(self._sizes) :])
        head = [self.summary] if self.summary else []
        size = (
            count_tokens(self.system)
            + sum(neutral_tokens(m) for m in head)
            + sum(self._sizes[self.start :])
        )
        if size > self.trigger:
            text, _, _ = self.summarizer.summarize_text(
                render_transcript(history[self.start :]),
                previous_summary=self.summary["content"] if self.summary else None,
                instructions=DEFAULT_PROMPT,
                kind="compaction",
            )
            iteration_input = size + count_tokens(DEFAULT_PROMPT)
            cached = min(self._previous, size)
            self.summarizer_cost += CACHE_READ * cached + (iteration_input - cached)
            self.summary = {"role": "user", "content": text}
            self.start = len(history)
            self.compactions += 1
            head = [self.summary]
            size = count_tokens(self.system) + neutral_tokens(self.summary)
        self._previous = size
        return Request(self.system, [], [*head, *history[self.start :]])
