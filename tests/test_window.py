"""Where the window splits: exact ids kept and summarized."""

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assistant.history.state_writes import write_state
from assistant.models import Conversation, Message
from assistant.services import (
    add_message,
    build_context,
    ensure_context_summary,
    regenerate_window_summary,
)
from assistant.settings.conf import compaction_config
from assistant.window import choose_split, load_window, should_shift
from tests.builders import chat_turns, html, tool_turn

pytestmark = pytest.mark.django_db


def rows_of(conversation):
    return load_window(conversation.pk).rows


def test_it_keeps_forty_percent_of_a_plain_conversation(conversation):
    messages = chat_turns(conversation, 10)  # 20 messages

    start = choose_split(rows_of(conversation))

    # ceil(20 * 0.4) = 8 kept: messages 12.. (a user message) stay verbatim.
    assert start == 12
    assert messages[start].role == "user"


def test_a_split_inside_a_tool_exchange_snaps_to_the_start_of_that_user_turn(conversation):
    chat_turns(conversation, 2)  # 0..3
    turn = tool_turn(  # 4 user, 5 assistant(calls), 6, 7, 8 tool, 9 answer
        conversation,
        "check three posts",
        [("get_blog_post", {"id": i}, f"post {i}") for i in range(3)],
    )
    chat_turns(conversation, 3)  # 10..15

    # 16 messages, keep ceil(6.4) = 7 -> wanted index 9 (the answer of the
    # tool turn); the previous user turn starts at 4 and is within the cap.
    start = choose_split(rows_of(conversation))

    assert start == 4
    assert rows_of(conversation)[start].pk == turn[0].pk


@override_settings(
    ASSISTANT_COMPACTION={"VERBATIM_AFTER_SHIFT": "recent", "MAX_RECENT_TOKENS": 300}
)
def test_the_token_cap_moves_the_split_forward_to_a_later_user_turn(conversation):
    chat_turns(conversation, 3, size=400)  # 0..5, each message ~101 tokens
    chat_turns(conversation, 3, size=4)  # 6..11, tiny

    # 12 messages, keep 6 -> wanted 6; suffix from 6 is tiny, stays at 6.
    assert choose_split(rows_of(conversation)) == 6

    chat_turns(conversation, 2, size=400)  # 12..15 large again
    # 16 messages, keep 7 -> wanted 9; suffix from 9 is ~ 4 x 101 + tiny > 300,
    # so the split moves forward until it fits: to the user turn at 14.
    assert choose_split(rows_of(conversation)) == 14


@override_settings(ASSISTANT_COMPACTION={"VERBATIM_AFTER_SHIFT": "recent", "MAX_RECENT_TOKENS": 10})
def test_a_turn_over_the_budget_splits_at_its_newest_step_never_past_it(conversation):
    chat_turns(conversation, 3)
    turn = tool_turn(conversation, "big", [("get_blog_post", {"id": 1}, html(8000))])

    rows = rows_of(conversation)
    start = choose_split(rows)

    # The turn alone is over the cap: the split falls at a step boundary
    # inside it, the newest step (the final answer), never past it.
    assert rows[start].pk == turn[-1].pk


@override_settings(
    ASSISTANT_COMPACTION={"VERBATIM_AFTER_SHIFT": "recent", "MAX_RECENT_TOKENS": 3000}
)
def test_a_turn_that_fits_is_kept_whole_from_its_user_message(conversation):
    chat_turns(conversation, 3)
    turn = tool_turn(conversation, "big", [("get_blog_post", {"id": 1}, html(8000))])

    rows = rows_of(conversation)
    start = choose_split(rows)

    assert rows[start].role == "user"
    assert rows[start].pk <= turn[0].pk


def test_keep_last_extends_back_to_the_start_of_the_user_turn(conversation):
    chat_turns(conversation, 2)
    turn = tool_turn(conversation, "go", [("run_sql", {"q": 1}, "r1"), ("run_sql", {"q": 2}, "r2")])

    rows = rows_of(conversation)
    start = choose_split(rows, keep_last=2)

    assert rows[start].pk == turn[0].pk


def test_no_split_when_the_window_is_one_user_turn(conversation):
    tool_turn(conversation, "only", [("run_sql", {"q": 1}, "r")])

    assert choose_split(rows_of(conversation)) is None


@override_settings(ASSISTANT_COMPACTION={"MAX_MESSAGES_BEFORE_SUMMARY": 10})
def test_the_message_count_triggers_a_shift(conversation):
    chat_turns(conversation, 4)
    assert not should_shift(load_window(conversation.pk), compaction_config())

    chat_turns(conversation, 1)

    assert should_shift(load_window(conversation.pk), compaction_config())


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 800,
    }
)
def test_a_fresh_provider_count_outweighs_the_estimate(conversation):
    chat_turns(conversation, 1)
    state = load_window(conversation.pk)
    assert state.context_tokens() == sum(row.token_estimate for row in state.rows) + 3

    add_message(conversation, "user", "next")
    add_message(conversation, "assistant", "ok", input_tokens=900, cache_read_tokens=200)

    state = load_window(conversation.pk)
    assert state.context_tokens() == 1100 + 1  # the reported prompt + the reply
    assert should_shift(state, compaction_config())


# Random conversations: whatever the thresholds, the split never separates a
# tool call from its results and the kept part starts with a user message.

turn_shapes = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000)), min_size=1, max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shapes=turn_shapes,
    fraction=st.floats(0.05, 0.95),
    min_recent=st.integers(1, 10),
    cap=st.integers(10, 5000),
    keep_last=st.one_of(st.none(), st.integers(0, 6)),
)
def test_any_split_keeps_tool_pairs_together(shapes, fraction, min_recent, cap, keep_last):
    conversation = Conversation.objects.create(title="random")
    for index, (tools, size) in enumerate(shapes):
        calls = [("run_sql", {"i": index, "t": t}, "r" * size) for t in range(tools)]
        tool_turn(conversation, f"turn {index}", calls)
    overrides = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "RECENT_FRACTION": fraction,
        "MIN_RECENT_MESSAGES": min_recent,
        "MAX_RECENT_TOKENS": cap,
    }

    with override_settings(ASSISTANT_COMPACTION=overrides):
        rows = rows_of(conversation)
        start = choose_split(rows, keep_last=keep_last)

    if start is not None:
        kept = rows[start:]
        last_user = max(i for i, row in enumerate(rows) if row.role == Message.Role.USER)
        # A user turn's start, or a step boundary inside the last turn
        # (whose user message is then sent ahead of it as the anchor).
        assert kept[0].role == Message.Role.USER or (
            kept[0].role == Message.Role.ASSISTANT and start > last_user
        )
        calls = {c["id"] for row in kept for c in row.tool_calls or ()}
        results = {row.tool_call_id for row in kept if row.role == "tool"}
        assert calls == results


def test_the_window_query_reads_the_window_not_every_message_of_a_long_conversation():
    conversation = Conversation.objects.create(title="long", system_prompt="You help.")
    Message.objects.bulk_create(
        Message(conversation=conversation, role=("user", "assistant")[i % 2], content=f"m{i}")
        for i in range(5_000)
    )
    newest = list(conversation.messages.order_by("-id").values_list("id", flat=True)[:100])
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {"compaction_summary": "Goal: ...", "compaction_through_message_id": newest[-1]},
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE assistant_message")
    with CaptureQueriesContext(connection) as queries:
        state = load_window(conversation.pk)
    assert len(state.rows) == 99
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries.captured_queries[-1]["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())

    # Both halves of "after the cutoff, or a system message" come from an index:
    # the system messages from their own, not by filtering every message.
    assert "assistant_msg_system" in plan and "Seq Scan" not in plan, plan


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 2_000,
        "MAX_RECENT_TOKENS": 1_999,
        "MAX_MESSAGES_BEFORE_SUMMARY": 100,
    }
)
def test_a_count_over_the_trigger_moves_the_split_though_the_estimates_fit(conversation):
    # The provider counts this text at 1.09 times our estimate, too little a
    # drift to renew the stored ratio (1.0): the estimates alone say the window
    # fits the trigger; the provider's count says it does not. The verbatim
    # budget is sized at the provider's count, so the split moves instead of
    # sending the request over the trigger with a newest step of a few tokens.
    chat_turns(conversation, 1, size=2_400)
    add_message(conversation, "user", "q1 " + "x" * 2_400)
    state = load_window(conversation.pk)
    request = state.estimated_tokens()
    add_message(conversation, "assistant", "a1", input_tokens=round(request * 1.09))
    add_message(conversation, "user", "q2 " + "z" * 200)
    call = [{"id": "call_1", "name": "lookup", "arguments": {}}]
    add_message(conversation, "assistant", "", tool_calls=call)
    add_message(conversation, "tool", "ok", tool_call_id="call_1")
    state = load_window(conversation.pk)
    assert state.context_tokens() >= 2_000 > state.estimated_tokens()
    assert state.measured_token_ratio() == pytest.approx(1.09, abs=0.005)

    ensure_context_summary(conversation)

    after = load_window(conversation.pk)
    assert [row.role for row in after.rows] == ["user", "assistant", "user", "assistant", "tool"]
    assert after.rows[0].content == "q1 " + "x" * 2_400


def agent_turn_past(conversation: Conversation, trigger: int) -> tuple[Message, list[Message]]:
    """One user request answered by file reads (3,000 characters each) until the
    context passes `trigger` tokens; returns the request and the reads' results."""
    request = add_message(conversation, "user", "Review the billing module, file by file.")
    results = []
    index = 0
    while load_window(conversation.pk).context_tokens() < trigger:
        call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"/src/f{index}.py"}}
        add_message(conversation, "assistant", f"Reading f{index}.", tool_calls=[call])
        result = html(3000, marker=f"def handler_{index}(): ")
        results.append(add_message(conversation, "tool", result, tool_call_id=call["id"]))
        index += 1
    return request, results


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 20_000})
def test_a_shift_keeps_the_turns_request_and_the_newest_step_and_indexes_the_rest(conversation):
    request, results = agent_turn_past(conversation, 20_000)

    ensure_context_summary(conversation)

    context = build_context(conversation)
    newest = results[-1]
    assert context.message_ids == [request.pk, newest.pk - 1, newest.pk]
    # What the older steps held is one handle away: every file read is in the index.
    summary = context.window_summary or ""
    assert all(f"/src/f{index}.py" in summary for index in range(len(results) - 1))
    assert Message.objects.get(pk=results[0].pk).content == results[0].content


@pytest.mark.parametrize(
    "written",
    [{"MAX_RECENT_TOKENS": 8_000}, {"RECENT_FRACTION": 0.4}, {}],
)
def test_a_written_recent_window_is_kept_verbatim_after_a_shift(conversation, written):
    asked = {"CONTEXT_TOKEN_THRESHOLD": 20_000, "VERBATIM_AFTER_SHIFT": "recent", **written}
    with override_settings(ASSISTANT_COMPACTION=asked):
        request, results = agent_turn_past(conversation, 20_000)
        ensure_context_summary(conversation)
        context = build_context(conversation)

    assert context.window_summary
    assert context.message_ids[0] == request.pk
    kept_results = [pk for pk in context.message_ids if pk in {r.pk for r in results}]
    assert len(kept_results) > 1


@pytest.mark.parametrize("written", [{"MAX_RECENT_TOKENS": 8_000}, {"RECENT_FRACTION": 0.4}])
def test_a_recent_window_key_written_alone_leaves_the_shift_keeping_the_newest_step(
    conversation, written
):
    # It asked for the recent window once, silently; now only VERBATIM_AFTER_SHIFT does
    # (`manage.py check` warns, assistant.W003).
    with override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 20_000, **written}):
        request, results = agent_turn_past(conversation, 20_000)
        ensure_context_summary(conversation)
        context = build_context(conversation)

    newest = results[-1]
    assert context.window_summary
    assert context.message_ids == [request.pk, newest.pk - 1, newest.pk]


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 20_000})
def test_a_regenerate_asking_for_the_last_messages_keeps_them_under_the_default(conversation):
    request, results = agent_turn_past(conversation, 20_000)

    regenerate_window_summary(conversation, keep_last=6)

    # The last three steps (six messages) and the turn's request they answer.
    kept = build_context(conversation).message_ids
    assert kept == [request.pk, *[pk for r in results[-3:] for pk in (r.pk - 1, r.pk)]]
