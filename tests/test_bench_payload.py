"""The bench's measuring tools: cost under prompt caching on the Anthropic
payload, the provider-shape checks, and the incremental payload builder."""

from __future__ import annotations

from assistant.providers.convert import to_anthropic, to_gemini
from bench.payload import CostMeter, _units, anthropic_problems, gemini_problems, unit_tokens
from bench.strategies import PayloadBuilder, Request
from bench.targets import written_once

USER = {"role": "user", "content": "List the files in the repository root."}
CALL = {
    "role": "assistant",
    "content": "Listing.",
    "tool_calls": [{"id": "t1", "name": "Bash", "arguments": {"command": "ls"}}],
}
RESULT = {
    "role": "tool",
    "content": "README.md\nsetup.py",
    "tool_call_id": "t1",
    "tool_name": "Bash",
}
ANSWER = {"role": "assistant", "content": "Two files: README.md and setup.py."}
NEXT = {"role": "user", "content": "Open setup.py."}


def anthropic(messages: list[dict]) -> dict:
    return to_anthropic("s", [], messages, check=False)  # unchecked: malformed on purpose


def gemini(messages: list[dict]) -> dict:
    return to_gemini("s", [], messages, check=False)


def tokens_of(payload: dict) -> list[int]:
    return [unit_tokens(unit) for unit in _units(payload)]


def test_first_request_is_all_cache_write_then_the_shared_prefix_is_read():
    meter = CostMeter()
    first = to_anthropic("You are an agent.", [], [USER])
    second = to_anthropic("You are an agent.", [], [USER, CALL, RESULT])

    a = meter.record(first)
    b = meter.record(second)

    sizes = tokens_of(second)  # system block, user, assistant, tool result
    assert a.tokens == sum(tokens_of(first)) and a.cached_tokens == 0
    assert a.cost == 1.25 * a.tokens
    # The cache marker moved off the user message: the unit still counts as identical.
    assert b.cached_tokens == sizes[0] + sizes[1]
    assert b.cost == 0.1 * (sizes[0] + sizes[1]) + 1.25 * (sizes[2] + sizes[3])
    assert meter.cost == a.cost + b.cost


def test_a_changed_summary_makes_everything_after_it_a_cache_write():
    meter = CostMeter()
    meter.record(to_anthropic("sys", ["summary one"], [USER, CALL, RESULT]))
    figures = meter.record(to_anthropic("sys", ["summary two"], [USER, CALL, RESULT]))

    assert figures.cached_tokens == tokens_of(to_anthropic("sys", [], []))[0]


def test_broken_pairs_and_bad_starts_on_both_provider_shapes():
    good = [USER, CALL, RESULT, ANSWER, NEXT]
    orphan_result = [USER, RESULT, ANSWER]
    unanswered_call = [USER, CALL, NEXT]
    starts_with_assistant = [ANSWER, NEXT]

    assert anthropic_problems(anthropic(good)) == (0, False)
    assert gemini_problems(gemini(good)) == (0, False)
    assert anthropic_problems(anthropic(orphan_result)) == (1, False)
    assert gemini_problems(gemini(orphan_result)) == (1, False)
    assert anthropic_problems(anthropic(unanswered_call)) == (1, False)
    assert gemini_problems(gemini(unanswered_call)) == (1, False)
    assert anthropic_problems(anthropic(starts_with_assistant)) == (0, True)
    assert gemini_problems(gemini(starts_with_assistant)) == (0, True)


def test_the_builder_gives_the_full_conversion_as_the_history_grows_and_changes():
    builder = PayloadBuilder()
    history = [USER, CALL, RESULT, ANSWER, NEXT]
    compacted = {**RESULT, "content": "[Already retrieved earlier — omitted to reduce context]"}
    requests = [
        Request("sys", [], history[:1]),
        Request("sys", [], history[:3]),
        Request("sys", [], history[:5]),
        Request("sys", ["a summary"], [USER, CALL, compacted, ANSWER, NEXT]),
        Request("sys", ["a summary"], history[3:]),
    ]
    meter_fast, meter_full = CostMeter(), CostMeter()
    for request in requests:
        fast, full = builder.build(request), request.to_anthropic()
        assert _units(fast) == _units(full)
        a, b = meter_fast.record(fast), meter_full.record(full)
        assert (a.tokens, a.cached_tokens) == (b.tokens, b.cached_tokens)


def test_the_builder_converts_whole_when_a_tool_call_id_is_reused():
    """The converter renames a reused id by what came before it in the request."""
    again = {**CALL, "content": "Listing again."}
    history = [USER, CALL, RESULT, ANSWER, NEXT, again, dict(RESULT)]
    builder = PayloadBuilder()
    for end in (1, 3, 5, 7):
        request = Request("sys", [], history[:end])
        assert _units(builder.build(request)) == _units(request.to_anthropic())
    ids = [
        block["id"]
        for message in builder.build(Request("sys", [], history))["messages"]
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    assert ids == ["t1", "t1_2"]


def test_the_cost_floor_is_what_sending_everything_pays_to_write_each_message_once():
    meter = CostMeter()
    history = [USER, CALL, RESULT, ANSWER, NEXT]
    for end in range(1, len(history) + 1, 2):
        meter.record(to_anthropic("You are an agent.", [], history[:end]))
    written = sum(r.tokens - r.cached_tokens for r in meter.requests)

    assert round(written_once(meter.tokens, meter.cost), 6) == round(1.25 * written, 6)
