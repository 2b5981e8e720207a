"""The bench's replay of our app under PROVIDER_COMPACTION (bench/provider_replay.py):
on a session whose requests pass the trigger, "provider" lets the emulated
compact_20260112 compact and sends its block back first, "auto" makes our window
shifts as on-demand compactions; both are well-formed requests, priced."""

from __future__ import annotations

import pytest

from assistant.models import Message
from bench.payload import payload_tokens
from bench.provider_replay import replay_under_provider
from bench.sessions import OURS_AUTO, OURS_PROVIDER, Session

pytestmark = pytest.mark.django_db


def long_session(turns: int = 8) -> Session:
    """Turns of one tool call each, its result about 12,500 tokens."""
    messages: list[dict] = []
    for turn in range(turns):
        call = {"id": f"c{turn}", "name": "Bash", "arguments": {"n": turn}}
        result = f"log {turn}: " + f"line {turn} of the build, artifact a{turn}\n" * 1300
        messages += [
            {"role": "user", "content": f"Check build {turn}."},
            {"role": "assistant", "content": "Running.", "tool_calls": [call]},
            {"role": "tool", "content": result, "tool_call_id": f"c{turn}", "tool_name": "Bash"},
            {"role": "assistant", "content": f"Build {turn} is green."},
        ]
    return Session("long", messages, {len(messages) - 1: ["artifact a7"]})


@pytest.mark.parametrize("name", [OURS_PROVIDER, OURS_AUTO])
def test_our_app_under_provider_compaction_replays_a_long_session(name):
    outcome = replay_under_provider(long_session(), name)

    assert outcome.error is None
    assert outcome.counters["compactions"] >= 1
    assert outcome.summarizer_cost > 0
    meter = outcome.meter
    assert (meter.requests_with_bad_start, meter.requests_with_broken_pair) == (0, 0)
    assert meter.probes == 1  # the probe was asked
    # The requests stay near the trigger: each compaction brought them down.
    assert max(r.tokens for r in meter.requests) < 50_000 + 15_000
    carriers = Message.objects.filter(provider_compaction__live=True)
    assert carriers.count() == outcome.counters["compactions"]
    on_demand = {c.provider_compaction["on_demand"] for c in carriers}
    assert on_demand == ({False} if name == OURS_PROVIDER else {True})


def test_the_meter_counts_the_block_and_accepts_a_request_opening_with_it():
    block = {"type": "compaction", "content": "word " * 400, "signature": "s"}
    payload = {"system": [], "messages": [{"role": "assistant", "content": [block]}]}
    assert payload_tokens(payload) > 300
