"""The peers the bench ports from their sources (no library to run): OpenHands'
LLMSummarizingCondenser, Anthropic's compact_20260112, and the Complexity Trap's
observation masking and hybrid. Each behaves as its source says, with its
defaults, on the bench's one fake summarizer."""

from __future__ import annotations

import pytest

from assistant.providers.summary_prompt import render_transcript
from bench.complexity_trap import SUMMARY_PROMPT, Hybrid, ObservationMasking
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


def test_masking_keeps_the_results_of_the_newest_ten_turns_and_masks_every_older_one():
    messages = session([2] * 14, result="line one\nline two\nline three")
    masking = ObservationMasking(SYSTEM)

    sent = requests(masking, messages)

    def before(step: int) -> Request:  # step n: messages[1 + 3n] and its two results
        return sent[1 + 3 * step]

    def masked(request: Request) -> list[str]:
        return [
            m["tool_call_id"]
            for m in request.messages
            if m["content"].startswith("Old environment output")
        ]

    assert before(10).messages == messages[: 1 + 3 * 10]  # ten turns: nothing masked
    assert masked(before(11)) == ["s0c0", "s0c1"]
    assert before(11).messages[2]["content"] == "Old environment output: (3 lines omitted)"
    assert masked(before(13)) == ["s0c0", "s0c1", "s1c0", "s1c1", "s2c0", "s2c1"]
    tools = [m for m in before(13).messages if m["role"] == "tool"]
    assert tools[6:] == [m for m in messages[1 + 3 * 3 : 1 + 3 * 13] if m["role"] == "tool"]
    # The calls stay, each with its result: no pair is broken, nothing else changes.
    assert [m for m in before(13).messages if m["role"] != "tool"] == [
        m for m in messages[: 1 + 3 * 13] if m["role"] != "tool"
    ]
    assert {anthropic_problems(r.to_anthropic()) for r in sent.values()} == {(0, False)}
    # A masked result is the same object from request to request (the payload builder
    # reuses it), so the cache reads up to the newly masked turn.
    assert before(12).messages[2] is before(13).messages[2]


def test_the_hybrid_folds_43_turns_into_a_checkpoint_once_53_wait_and_masks_what_it_sends():
    messages = session([1] * 100, result="out")
    fake = FakeSummarizer()
    hybrid = Hybrid(SYSTEM, fake)

    sent = requests(hybrid, messages)

    def before(step: int) -> Request:  # step n: messages[1 + 2n] and its result
        return sent[1 + 2 * step]

    def masked(request: Request) -> list[str]:
        return [
            m["tool_call_id"]
            for m in request.messages
            if m["content"].startswith("Old environment output")
        ]

    # 52 turns: no summary yet, the results of all but the newest ten masked.
    assert before(52).messages[0] is messages[0] and len(before(52).messages) == 1 + 2 * 52
    assert masked(before(52)) == [f"s{n}c0" for n in range(42)]
    # 53 turns wait: the oldest 43 go to the summarizer, unmasked, with the task as
    # context; the request is the task, the checkpoint and the ten turns kept.
    first = before(53)
    checkpoint = first.messages[1]
    assert first.messages[0] is messages[0]
    assert checkpoint["role"] == "assistant"
    assert checkpoint["content"].startswith("Checkpoint for the last 43 turns:\n")
    assert first.messages[2:] == messages[1 + 2 * 43 : 1 + 2 * 53]
    task = "<PROBLEM_STATEMENT>\nFix the failing build.\n</PROBLEM_STATEMENT>\n"
    assert fake.calls[0].input_tokens == count_tokens(SUMMARY_PROMPT) + count_tokens(
        task + render_transcript(messages[1 : 1 + 2 * 43])
    )
    # The mask rolls on over the turns kept; the checkpoint stays until the next one.
    assert masked(before(64)) == [f"s{n}c0" for n in range(43, 54)]
    assert before(64).messages[1] is checkpoint
    # 53 turns wait again at step 96: one new checkpoint, the old one not sent.
    second = before(96)
    assert len(fake.calls) == 2 and hybrid.summarized == 86
    assert second.messages[1] is not checkpoint
    assert second.messages[1]["content"].startswith("Checkpoint for the last 43 turns:\n")
    assert sum("Checkpoint" in m["content"] for m in second.messages) == 1
    assert second.messages[2:] == messages[1 + 2 * 86 : 1 + 2 * 96]
    assert {anthropic_problems(r.to_anthropic()) for r in sent.values()} == {(0, False)}
