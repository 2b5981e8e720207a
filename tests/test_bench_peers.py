"""The two peers the bench ports from their sources (no library to run):
OpenHands' LLMSummarizingCondenser and Anthropic's compact_20260112. Each
behaves as its source says, with its defaults, on the bench's one fake
summarizer."""

from __future__ import annotations

import pytest

from bench.fake_summarizer import FakeSummarizer, count_tokens
from bench.openhands import OpenHandsCondenser
from bench.payload import anthropic_problems, neutral_tokens
from bench.server_compaction import DEFAULT_PROMPT, ServerCompaction
from bench.strategies import Request

SYSTEM = "You are an agent."


def session(steps: list[int], result: str = "ok") -> list[dict]:
    """A user request, then one assistant step per entry with that many
    parallel tool calls, each answered by its result."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing build."}]
    for n, calls in enumerate(steps):
        ids = [f"s{n}c{c}" for c in range(calls)]
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {n}.",
                "tool_calls": [{"id": i, "name": "Bash", "arguments": {"n": i}} for i in ids],
            }
        )
        messages += [
            {"role": "tool", "content": f"{result} {i}", "tool_call_id": i, "tool_name": "Bash"}
            for i in ids
        ]
    return messages


def requests(strategy, messages: list[dict]) -> dict[int, Request]:
    """The request before each assistant message, by its index."""
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return {i: strategy.request(messages[:i]) for i in calls}


def test_openhands_condenses_past_100_events_to_the_first_one_a_summary_and_the_newest_48():
    messages = session([1] * 60)
    fake = FakeSummarizer()
    condenser = OpenHandsCondenser(SYSTEM, fake)

    sent = requests(condenser, messages)

    # Events: the system message, the user's, then an action and an observation a
    # step. Before step 50 the view holds 102 events: the first condensation.
    step_49, step_50 = sent[1 + 2 * 49], sent[1 + 2 * 50]
    assert len(step_49.messages) == 1 + 2 * 49
    assert fake.call_count == 1
    assert [e.kind for e in condenser.view()[:2]] == ["system", "summary"]
    # The initial user message is put back, the summary follows it as a user
    # message, then the newest 48 events: steps 26 to 49, each call with its result.
    assert step_50.messages[0] is messages[0]
    assert step_50.messages[1]["content"].startswith("\n\n## Goal")
    assert step_50.messages[2:] == messages[1 + 2 * 26 : 1 + 2 * 50]
    assert len(step_50.messages) == 50


def test_openhands_never_sends_a_call_without_its_result_whatever_the_cut():
    messages = session([3, 2] * 30)
    condenser = OpenHandsCondenser(SYSTEM, FakeSummarizer())
    sent: dict[int, Request] = {}
    first_view: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            sent[index] = condenser.request(messages[:index])
            if condenser.condensations == 1 and not first_view:
                first_view = {
                    messages[e.index].get("tool_call_id") for e in condenser.view() if e.index > 0
                }
                first_cut = index

    assert condenser.condensations == 4
    assert {anthropic_problems(r.to_anthropic()) for r in sent.values()} == {(0, False)}
    # The first cut (before step 14) keeps the last two of step 10's three calls
    # and their results, not the first: the whole step stays out of the request.
    assert first_cut == 71
    assert {"s10c1", "s10c2"} <= first_view and "s10c0" not in first_view
    ids = [m.get("tool_call_id") for m in sent[first_cut].messages]
    assert "s10c1" not in ids and "s10c2" not in ids
    assert sent[first_cut].messages[2]["tool_calls"][0]["id"] == "s11c0"


def test_server_compaction_replaces_everything_before_it_with_the_summary_past_the_trigger():
    messages = session([1] * 12, result="word " * 6000)  # about 6,000 tokens a result
    fake = FakeSummarizer()
    compaction = ServerCompaction(SYSTEM, fake, trigger=50_000)
    sizes = [neutral_tokens(m) for m in messages]

    sent = requests(compaction, messages)

    fired = next(i for i in sent if count_tokens(SYSTEM) + sum(sizes[:i]) > 50_000)
    before = max(i for i in sent if i < fired)
    assert compaction.compactions == 1 and fake.call_count == 1
    assert sent[fired].messages == [compaction.summary]
    assert sent[fired + 2].messages == [compaction.summary, *messages[fired : fired + 2]]
    # The compaction iteration reads the previous request from the cache and
    # pays the new messages and the default prompt in full.
    previous = count_tokens(SYSTEM) + sum(sizes[:before])
    iteration = count_tokens(SYSTEM) + sum(sizes[:fired]) + count_tokens(DEFAULT_PROMPT)
    assert compaction.summarizer_cost == pytest.approx(0.1 * previous + iteration - previous)


def test_server_compaction_refuses_a_trigger_below_its_documented_minimum():
    with pytest.raises(ValueError, match="at least 50,000"):
        ServerCompaction(SYSTEM, FakeSummarizer(), trigger=49_999)
