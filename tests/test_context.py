"""build_context: what the model sees, validated, in a fixed order."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assistant.history.state_writes import write_state
from assistant.models import Conversation, Message
from assistant.services import add_message, build_context, ensure_context_summary, prepare_context
from assistant.window.context import MISSING_RESULT, IncompleteToolCall
from tests.builders import chat_turns, tool_turn

pytestmark = pytest.mark.django_db


def set_summary(conversation, summary, through_id, **extra):
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {"compaction_summary": summary, "compaction_through_message_id": through_id, **extra},
    )


def test_it_orders_system_parent_summary_window_summary_then_the_tail(conversation):
    messages = chat_turns(conversation, 4)
    set_summary(
        conversation,
        "## Goal\nfix post 42",
        messages[3].pk,
        parent_conversation_summary="## Goal\nparent work",
    )

    context = build_context(conversation)

    assert context.system == "You help."
    assert context.summaries == [
        "Summary of the conversation this one continues:\n## Goal\nparent work",
        "Summary of the earlier part of this conversation:\n## Goal\nfix post 42",
    ]
    assert context.message_ids == [m.pk for m in messages[4:]]
    assert context.messages[0] == {"role": "user", "content": messages[4].content}
    assert context.cutoff_id == messages[3].pk
    assert context.tokens.system == 3
    assert context.tokens.total == (
        context.tokens.system + context.tokens.summaries + context.tokens.messages
    )


def test_it_sends_the_model_facing_text_of_compacted_messages(conversation):
    turn = tool_turn(conversation, "read", [("get_blog_post", {"id": 1}, "<html>" * 500)])
    Message.objects.filter(pk=turn[2].pk).update(
        compacted_content="[short]", compaction="truncated", token_estimate=2
    )

    context = build_context(conversation)

    assert context.messages[2] == {
        "role": "tool",
        "content": "[short]",
        "tool_call_id": turn[2].tool_call_id,
        "tool_name": "get_blog_post",
    }
    assert context.tokens.tool_results == 2


# 2,000 messages written through add_message take over 30 s under load: `make test-slow`.
@pytest.mark.parametrize("length", [25, pytest.param(1000, marks=pytest.mark.slow)])
def test_the_query_count_does_not_grow_with_the_conversation(
    conversation, length, django_assert_num_queries
):
    messages = chat_turns(conversation, length)  # 50 or 2,000 messages
    set_summary(conversation, "## Goal\nx", messages[-7].pk)

    with django_assert_num_queries(2):
        context = build_context(conversation)

    assert len(context.messages) == 6


def test_the_hook_and_the_request_it_prepares_load_the_window_once(
    conversation, django_assert_num_queries
):
    messages = chat_turns(conversation, 25)
    set_summary(conversation, "## Goal\nx", messages[-7].pk)
    ensure_context_summary(conversation)  # the stored size and the ledger settled

    with django_assert_num_queries(2):
        context = prepare_context(conversation)

    assert context.message_ids == [m.pk for m in messages[-6:]]
    assert context.to_anthropic() == build_context(conversation).to_anthropic()


def test_a_cutoff_that_orphans_a_tool_result_moves_back_to_its_user_turn(conversation):
    chat_turns(conversation, 1)
    turn = tool_turn(conversation, "go", [("run_sql", {"q": 1}, "r1"), ("run_sql", {"q": 2}, "r2")])
    # A cutoff between the call and its results (as a bad cache might hold).
    set_summary(conversation, "## Goal\nx", turn[2].pk)

    context = build_context(conversation)

    assert context.message_ids == [m.pk for m in turn]
    assert context.messages[0]["role"] == "user"


def test_a_history_that_starts_with_the_assistant_is_never_sent_that_way(conversation):
    add_message(conversation, "assistant", "Hi! How can I help?")
    add_message(conversation, "user", "Fix post 42")

    context = build_context(conversation)

    assert [m["role"] for m in context.messages] == ["user"]


def test_a_call_whose_result_was_never_recorded_gets_a_placeholder(conversation):
    add_message(conversation, "user", "go")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[
            {"id": "a", "name": "run_sql", "arguments": {}},
            {"id": "b", "name": "run_sql", "arguments": {"x": 1}},
        ],
    )
    add_message(conversation, "tool", "rows", tool_call_id="a")
    add_message(conversation, "assistant", "Only one came back.")
    add_message(conversation, "user", "ok")

    context = build_context(conversation)

    assert [m.get("tool_call_id") for m in context.messages] == [None, None, "a", "b", None, None]
    assert context.messages[3]["content"] == MISSING_RESULT
    assert not Message.objects.filter(tool_call_id="b").exists()  # not in the history


def test_pending_calls_at_the_end_are_an_error(conversation):
    add_message(conversation, "user", "go")
    add_message(
        conversation, "assistant", "", tool_calls=[{"id": "a", "name": "x", "arguments": {}}]
    )

    with pytest.raises(IncompleteToolCall, match="tool calls without results"):
        build_context(conversation)


def test_a_pending_call_that_reuses_an_answered_id_is_an_error(conversation):
    call = {"id": "a", "name": "x", "arguments": {}}
    add_message(conversation, "user", "go")
    add_message(conversation, "assistant", "", tool_calls=[call])
    add_message(conversation, "tool", "first", tool_call_id="a")
    add_message(conversation, "assistant", "", tool_calls=[call])

    with pytest.raises(IncompleteToolCall, match=r"\(a\)"):
        build_context(conversation)


def test_a_result_stored_after_a_later_message_is_sent_right_after_its_call(conversation):
    calls = [{"id": "a", "name": "x", "arguments": {}}, {"id": "b", "name": "x", "arguments": {}}]
    add_message(conversation, "user", "go")
    add_message(conversation, "assistant", "", tool_calls=calls)
    add_message(conversation, "tool", "A", tool_call_id="a")
    add_message(conversation, "user", "and b?")
    add_message(conversation, "tool", "B", tool_call_id="b")

    context = build_context(conversation)

    assert [(m["role"], m["content"]) for m in context.messages] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "A"),
        ("tool", "B"),
        ("user", "and b?"),
    ]


def test_a_cutoff_between_a_reused_call_and_its_result_moves_back(conversation):
    call = {"id": "a", "name": "x", "arguments": {}}
    add_message(conversation, "user", "go")
    add_message(conversation, "assistant", "", tool_calls=[call])
    add_message(conversation, "tool", "first", tool_call_id="a")
    add_message(conversation, "user", "again")
    add_message(conversation, "assistant", "", tool_calls=[call])
    second = add_message(conversation, "tool", "second", tool_call_id="a")
    set_summary(conversation, "## Goal\nx", second.pk - 1)

    context = build_context(conversation)

    assert [m["content"] for m in context.messages] == ["again", "", "second"]


def test_it_never_loads_originals_of_compacted_messages(conversation):
    turn = tool_turn(conversation, "read", [("get_blog_post", {"id": 1}, "ORIGINAL" * 500)])
    Message.objects.filter(pk=turn[2].pk).update(
        compacted_content="[short]", compaction="truncated"
    )

    with CaptureQueriesContext(connection) as captured:
        build_context(conversation)

    message_sql = [q["sql"] for q in captured.captured_queries if "assistant_message" in q["sql"]]
    assert len(message_sql) == 1
    assert message_sql[0].count('"assistant_message"."content"') == 1  # inside COALESCE only


def test_it_converts_to_both_providers_with_tool_pairs_and_cache_breakpoints(conversation):
    chat_turns(conversation, 1)
    turn = tool_turn(conversation, "read post 7", [("get_blog_post", {"id": 7}, "<p>hi</p>")])
    set_summary(conversation, "## Goal\nx", turn[0].pk - 1)
    call_id = turn[1].tool_calls[0]["id"]

    context = build_context(conversation)
    anthropic = context.to_anthropic()
    gemini = context.to_gemini()

    assert [b.get("cache_control") for b in anthropic["system"]] == [
        {"type": "ephemeral"},
        {"type": "ephemeral"},
    ]
    assert anthropic["system"][1]["text"].endswith("## Goal\nx")
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user", "assistant"]
    assert anthropic["messages"][1]["content"] == [
        {"type": "tool_use", "id": call_id, "name": "get_blog_post", "input": {"id": 7}}
    ]
    assert anthropic["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": "<p>hi</p>",
    }
    assert gemini["system_instruction"].startswith("You help.\n\nSummary of the earlier part")
    assert [c["role"] for c in gemini["contents"]] == ["user", "model", "user", "model"]
    assert gemini["contents"][1]["parts"][0]["function_call"]["name"] == "get_blog_post"
    assert gemini["contents"][2]["parts"][0]["function_response"]["id"] == call_id
