"""Our app under PROVIDER_COMPACTION "provider" and "auto" on the real sessions
(docs/provider-compaction.rst), as a chat backend runs it, with Anthropic's
compaction emulated where the model call would be.

Each model call does what `chat_step` does before the call: the app's choice
for the setting (`provider_step`), the pre-call hook when that runs (under
"auto" its window shifts are asked of the emulated on-demand compaction through
the same `compact_on_demand` a host's call_model reaches), then the request
(`build_context(...).to_anthropic()`). The emulated server answers as
bench/server_compaction.py reads the documentation of `compact_20260112`: past
the trigger (the app's `threshold_compaction` edit) the FakeSummarizer writes
the summary under the default prompt, the answer opens with the compaction
block, and the call itself reads the system prompt and the block alone; an
on-demand request (the app's `on_demand_compaction`) answers the block alone.
The block is stored by the app's own `record_response` path (add_message with
`provider_compaction`), and every later request is the app's: the block first,
the messages before it left out. Each compaction iteration is priced as the
peer prices it (the previous request's tokens read from the cache at 0.1x, the
rest at 1.0x); its output is reported with the summarizer's.
Import after django.setup().
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.test import override_settings

from assistant import services
from assistant.models import Conversation
from assistant.provider_compaction.choice import compact_on_demand, provider_step
from assistant.providers.anthropic.wire import ANTHROPIC
from assistant.providers.base import ChatResult, Usage
from assistant.providers.compaction_blocks import Record
from assistant.providers.summary_prompt import render_transcript
from assistant.settings.conf import compaction_config
from assistant.testing.fake_compaction import signature
from assistant.window import WindowState
from assistant.window.decision import Shift
from bench.chat import finish_turn, store
from bench.fake_summarizer import FakeSummarizer, count_tokens
from bench.measures import price_recalls, use_fake
from bench.outcome import Outcome, failure_text
from bench.payload import CACHE_READ, CostMeter, neutral_tokens, payload_tokens
from bench.server_compaction import DEFAULT_PROMPT
from bench.sessions import OURS_AUTO, OURS_PROVIDER, SYSTEM_PROMPT, Session

MODEL = "claude-sonnet-4-6"
MODES = {OURS_PROVIDER: "provider", OURS_AUTO: "auto"}


class EmulatedServer:
    """Anthropic's side of one conversation: compacts what it is asked to, prices it."""

    def __init__(self, summarizer: FakeSummarizer) -> None:
        self.summarizer = summarizer
        self.cost = 0.0  # compaction iterations, in input-token units (1.0x)
        self.compactions = 0
        self.previous = 0  # the tokens of the previous request

    def compaction(self, payload: dict[str, Any], *, on_demand: bool) -> dict[str, Any]:
        """A compaction of the request `payload`: the block, stored as the app reads it."""
        size = payload_tokens(payload)
        text, _, output = self.summarizer.summarize_text(
            render_transcript(_transcript(payload)),
            instructions=DEFAULT_PROMPT,
            kind="compaction",
        )
        iteration = size + count_tokens(DEFAULT_PROMPT)
        cached = min(self.previous, size)
        self.cost += CACHE_READ * cached + (iteration - cached)
        self.compactions += 1
        block = {
            "type": "compaction",
            "content": text,
            "signature": signature(text),
            "encrypted_content": None,
        }
        usage = Usage(input_tokens=iteration - cached, output_tokens=output)
        return Record(ANTHROPIC.name, block, True, on_demand, usage).stored()

    def on_demand(self, request: dict[str, Any]) -> ChatResult:
        """`call_model` for the app's on-demand compaction request."""
        compaction = self.compaction(request, on_demand=True)
        return ChatResult("", Usage(), MODEL, "compaction", compaction=compaction)


def _transcript(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages as neutral text messages (the summarizer's transcript)."""
    messages = []
    for message in payload.get("messages") or []:
        parts = []
        for block in message["content"]:
            value = block.get("text") or block.get("content") or block.get("input") or ""
            parts.append(value if isinstance(value, str) else str(value))
        messages.append({"role": message["role"], "content": "\n".join(parts)})
    return messages


def replay(session: Session, name: str, meter: CostMeter, server: EmulatedServer) -> None:
    """Our app on `session` under PROVIDER_COMPACTION = MODES[name], its requests
    recorded in `meter`, its compactions priced by `server`."""
    keys = {**(getattr(settings, "ASSISTANT_COMPACTION", None) or {})}
    ends = session.turn_ends()
    overrides = {**keys, "PROVIDER_COMPACTION": MODES[name]}
    with use_fake(server.summarizer), override_settings(ASSISTANT_COMPACTION=overrides):
        conversation = Conversation.objects.create(
            title=f"real {session.name}", system_prompt=SYSTEM_PROMPT
        )
        for index, message in enumerate(session.messages):
            fields: dict[str, Any] = {}
            if message["role"] == "assistant":
                newest = sum(neutral_tokens(m) for m in session.newest_step(index))
                probes = session.probes.get(index)
                at = session.call_time(index)
                fields = _model_call(conversation, server, meter, probes, newest, at)
            store(conversation, message, **fields)
            if index in ends:
                finish_turn(conversation)


def _model_call(
    conversation: Conversation,
    server: EmulatedServer,
    meter: CostMeter,
    probes: list[str] | None,
    newest: int,
    at: float | None = None,
) -> dict[str, Any]:
    """What chat_step does before the call, the emulated call, and the fields the
    answer is stored with."""
    step = provider_step(conversation, ANTHROPIC, compaction_config(), server.on_demand, None)

    def on_demand(state: WindowState, shift: Shift) -> bool:
        return compact_on_demand(state, shift, ANTHROPIC, server.on_demand, None)

    if step.run_hook:
        services.ensure_context_summary(
            conversation, on_demand=on_demand if step.on_demand else None
        )
    payload = services.build_context(conversation).to_anthropic()
    fields: dict[str, Any] = {"model": MODEL}
    trigger = (step.extras or {}).get("context_management", {}).get("edits", [{}])[0]
    value = (trigger.get("trigger") or {}).get("value")
    if value is not None and payload_tokens(payload) > value:
        compaction = server.compaction(payload, on_demand=False)
        fields["provider_compaction"] = compaction
        # The call reads the system prompt and the summary alone.
        summary = {"type": "text", "text": compaction["block"]["content"]}
        alone = [{"role": "user", "content": [summary]}]
        payload = {"system": payload["system"], "messages": alone}
    figures = meter.record(payload, probes or [], newest, at)
    price_recalls(meter, conversation.pk, payload)
    server.previous = figures.tokens
    fields["input_tokens"] = figures.tokens
    return fields


def replay_under_provider(session: Session, name: str) -> Outcome:
    """Ours under PROVIDER_COMPACTION (bench/provider_replay.py): `name` is
    OURS_PROVIDER or OURS_AUTO; the emulated compaction iterations are its summarizer
    cost."""
    outcome = Outcome(name, session.name, CostMeter())
    server = EmulatedServer(FakeSummarizer())
    started = time.perf_counter()
    try:
        replay(session, name, outcome.meter, server)
    except Exception as exc:  # reported per conversation, the run goes on
        outcome.error = failure_text(exc)
    outcome.summarizer = server.summarizer.totals()
    # The compaction iterations as the server prices them, our own summaries at 1.0x.
    ours = sum(v.get("input_tokens", 0) for k, v in outcome.summarizer.items() if k != "compaction")
    outcome.summarizer_cost = server.cost + ours
    outcome.counters = {"compactions": server.compactions}
    outcome.seconds = time.perf_counter() - started
    return outcome
