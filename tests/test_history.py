"""add_message validates at the door and saves nothing on bad input."""

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from assistant.models import Message
from assistant.services import add_message

CALL = {"id": "call_1", "name": "get_blog_post", "arguments": {"post_id": 7}}


@pytest.fixture
def with_tool_call(conversation):
    add_message(conversation, "user", "Show me post 7")
    add_message(conversation, "assistant", "", tool_calls=[CALL])
    return conversation


def test_it_stores_a_tool_exchange_with_estimates_and_call_details(with_tool_call):
    result = add_message(
        with_tool_call, "tool", "<html>" + "x" * 395 + "</html>", tool_call_id="call_1"
    )

    result.refresh_from_db()
    assert result.tool_name == "get_blog_post"
    assert result.tool_arguments == {"post_id": 7}
    assert result.token_estimate == 102  # ceil(408 / 4)
    assert result.original_token_estimate == 102
    assert result.compacted_content is None


def test_it_parses_string_arguments_into_an_object(conversation):
    message = add_message(
        conversation,
        "assistant",
        tool_calls=[{"id": "c1", "name": "run_sql", "arguments": '{"query": "SELECT 1"}'}],
    )

    message.refresh_from_db()
    assert message.tool_calls == [
        {"id": "c1", "name": "run_sql", "arguments": {"query": "SELECT 1"}}
    ]


BAD_INPUT = [
    pytest.param({"role": "moderator", "content": "hi"}, "invalid_role", id="unknown-role"),
    pytest.param({"role": "tool", "content": "rows"}, "missing_tool_call_id", id="tool-without-id"),
    pytest.param(
        {"role": "tool", "content": "rows", "tool_call_id": "call_999"},
        "unknown_tool_call_id",
        id="tool-result-for-no-call",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": {"id": "c2", "name": "x", "arguments": {}}},
        "invalid_tool_calls",
        id="tool-calls-not-a-list",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "c2", "name": "x"}]},
        "invalid_tool_calls",
        id="tool-call-missing-arguments",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "", "name": "x", "arguments": {}}]},
        "invalid_tool_calls",
        id="tool-call-empty-id",
    ),
    pytest.param(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c2", "name": "x", "arguments": {}},
                {"id": "c2", "name": "y", "arguments": {}},
            ],
        },
        "duplicate_tool_call_id",
        id="duplicate-tool-call-ids",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "c2", "name": "x", "arguments": "{not json"}]},
        "invalid_tool_arguments",
        id="malformed-json-arguments",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "c2", "name": "x", "arguments": [1, 2]}]},
        "invalid_tool_arguments",
        id="arguments-not-an-object",
    ),
    pytest.param(
        {
            "role": "user",
            "content": "hi",
            "tool_calls": [{"id": "c2", "name": "x", "arguments": {}}],
        },
        "invalid_tool_calls",
        id="tool-calls-on-a-user-message",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": ["a"]}, "invalid_metadata", id="metadata-list"
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": {"when": object()}},
        "invalid_metadata",
        id="metadata-not-json",
    ),
    pytest.param({"role": "user", "content": "nul\x00byte"}, "nul_byte", id="nul-byte"),
    pytest.param(
        {"role": "user", "content": "bad \ud800 surrogate"}, "invalid_unicode", id="lone-surrogate"
    ),
    pytest.param({"role": "user", "content": b"bytes"}, "invalid_content", id="bytes-content"),
    pytest.param(
        {"role": "assistant", "content": "ok", "input_tokens": -5},
        "invalid_usage",
        id="negative-usage",
    ),
]


@pytest.mark.parametrize(("kwargs", "code"), BAD_INPUT)
def test_it_refuses_bad_input_and_saves_nothing(with_tool_call, kwargs, code):
    before = list(Message.objects.values_list("id", flat=True))

    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, **kwargs)

    assert raised.value.code == code
    assert list(Message.objects.values_list("id", flat=True)) == before


def test_it_refuses_a_second_result_for_the_same_call(with_tool_call):
    add_message(with_tool_call, "tool", "first", tool_call_id="call_1")

    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, "tool", "second", tool_call_id="call_1")

    assert raised.value.code == "duplicate_tool_result"
    assert Message.objects.filter(role="tool").count() == 1


def test_it_refuses_a_tool_call_id_of_another_conversation(with_tool_call, django_user_model):
    other = type(with_tool_call).objects.create(title="other")

    with pytest.raises(ValidationError) as raised:
        add_message(other, "tool", "rows", tool_call_id="call_1")

    assert raised.value.code == "unknown_tool_call_id"
    assert other.messages.count() == 0


@override_settings(ASSISTANT_COMPACTION={"MAX_CONTENT_BYTES": 1000})
def test_it_refuses_content_over_the_configured_maximum(conversation):
    add_message(conversation, "user", "é" * 500)  # exactly 1000 bytes in UTF-8

    with pytest.raises(ValidationError) as raised:
        add_message(conversation, "user", "é" * 500 + "!")

    assert raised.value.code == "content_too_large"
    assert "1001 bytes" in raised.value.message
    assert conversation.messages.count() == 1


def test_the_default_maximum_refuses_a_tool_result_over_five_megabytes(with_tool_call):
    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, "tool", "x" * (5 * 1024 * 1024 + 1), tool_call_id="call_1")

    assert raised.value.code == "content_too_large"
    assert not Message.objects.filter(role="tool").exists()


def test_it_keeps_unicode_content_verbatim(conversation):
    text = "Zürich → 東京 🚀 \u200b café"

    message = add_message(conversation, "user", text)

    message.refresh_from_db()
    assert message.content == text


def test_unknown_fields_are_a_programming_error(conversation):
    with pytest.raises(TypeError, match="tool_cals"):
        add_message(conversation, "assistant", tool_cals=[])
