"""add_message validates at the door and saves nothing on bad input."""

import json
import re
import threading
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection
from django.test import override_settings
from django.utils import timezone

from assistant.models import ONE_RESULT_PER_CALL, Conversation, Message
from assistant.services import add_message
from assistant.window import context_size

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


def test_an_assistant_message_with_empty_text_beside_tool_calls_is_stored(conversation):
    add_message(conversation, "user", "Show me post 7")

    message = add_message(conversation, "assistant", "\n", tool_calls=[CALL])

    assert (message.content, len(message.tool_calls)) == ("\n", 1)


@pytest.mark.parametrize(
    "blocks",
    [None, [{"type": "thinking", "thinking": "Nothing to add.", "signature": "sig-1"}]],
    ids=["no-content", "only-thinking"],
)
def test_a_model_answer_with_no_text_and_no_tool_calls_is_stored(conversation, blocks):
    add_message(conversation, "user", "Thanks, that's all")

    message = add_message(conversation, "assistant", "", blocks=blocks)

    message.refresh_from_db()
    assert (message.role, message.content, message.tool_calls, message.blocks) == (
        "assistant",
        "",
        None,
        blocks,
    )
    assert conversation.messages.count() == 2


def test_an_empty_tool_result_is_stored(with_tool_call):
    result = add_message(with_tool_call, "tool", "", tool_call_id="call_1")

    assert result.content == ""


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
        {"role": "assistant", "tool_calls": [{"id": "  ", "name": "x", "arguments": {}}]},
        "invalid_tool_calls",
        id="tool-call-blank-id",
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
    pytest.param({"role": "user", "content": ""}, "empty_message", id="empty-user-message"),
    pytest.param({"role": "user", "content": " \n\t"}, "empty_message", id="blank-user-message"),
    pytest.param({"role": "system", "content": ""}, "empty_message", id="empty-system-message"),
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


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _call(**overrides) -> dict:
    return {"role": "assistant", "tool_calls": [{**CALL, "id": "c2", **overrides}]}


# Every field is capped and checked for what the database would refuse.
BAD_FIELDS = [
    pytest.param(
        {"role": "assistant", "tool_calls": [{**CALL, "id": f"c{i}"} for i in range(257)]},
        "too_many_tool_calls",
        id="257-tool-calls",
    ),
    pytest.param(_call(id="c" * 256), "value_too_long", id="call-id-over-255"),
    pytest.param(_call(name="n" * 256), "value_too_long", id="call-name-over-255"),
    pytest.param(
        {"role": "tool", "content": "rows", "tool_call_id": "c" * 256},
        "value_too_long",
        id="result-call-id-over-255",
    ),
    pytest.param(
        _call(arguments={"x": float("nan")}), "invalid_tool_arguments", id="nan-in-arguments"
    ),
    pytest.param(
        _call(arguments='{"x": NaN}'), "invalid_tool_arguments", id="nan-in-argument-string"
    ),
    pytest.param(_call(arguments={"x": "a\x00b"}), "nul_byte", id="nul-in-arguments"),
    pytest.param(_call(arguments='{"x": "a\\u0000b"}'), "nul_byte", id="nul-in-argument-string"),
    pytest.param(
        _call(arguments={"x\ud800": 1}), "invalid_unicode", id="surrogate-in-argument-key"
    ),
    pytest.param(_call(arguments=_nested(5000)), "too_deeply_nested", id="5000-level-arguments"),
    pytest.param(
        _call(arguments='{"x": ' + "[" * 5000 + "]" * 5000 + "}"),
        "too_deeply_nested",
        id="5000-level-argument-string",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": {"x": float("inf")}},
        "invalid_metadata",
        id="infinity-in-metadata",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": {"x": ["\x00"]}},
        "nul_byte",
        id="nul-in-metadata",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": {"x": "\udfff"}},
        "invalid_unicode",
        id="surrogate-in-metadata",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": _nested(5000)},
        "too_deeply_nested",
        id="5000-level-metadata",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": {"blob": "x" * (256 * 1024)}},
        "metadata_too_large",
        id="metadata-over-256-kib",
    ),
    pytest.param(
        {"role": "assistant", "content": "ok", "input_tokens": 2**31},
        "invalid_usage",
        id="input-tokens-2-to-the-31",
    ),
    pytest.param(
        {"role": "assistant", "content": "ok", "cache_read_tokens": 2**40},
        "invalid_usage",
        id="cache-read-tokens-over-the-column",
    ),
]
BAD_INPUT += BAD_FIELDS
# The fields of a tool result belong to tool messages; a result's arguments are its call's.
BAD_INPUT += [
    pytest.param(
        {"role": "user", "content": "hi", "tool_call_id": "call_1"},
        "tool_fields_on_non_tool",
        id="tool-call-id-on-a-user-message",
    ),
    pytest.param(
        {"role": "user", "content": "hi", "tool_name": "get_blog_post"},
        "tool_fields_on_non_tool",
        id="tool-name-on-a-user-message",
    ),
    pytest.param(
        {"role": "assistant", "content": "ok", "tool_arguments": {"post_id": 7}},
        "tool_fields_on_non_tool",
        id="tool-arguments-on-an-assistant-message",
    ),
    pytest.param(
        {
            "role": "tool",
            "content": "rows",
            "tool_call_id": "call_1",
            "tool_arguments": {"post_id": 8},
        },
        "tool_arguments_mismatch",
        id="tool-arguments-not-the-calls",
    ),
    pytest.param(
        {
            "role": "tool",
            "content": "rows",
            "tool_call_id": "call_1",
            "tool_arguments": '{"post_id": 8}',
        },
        "tool_arguments_mismatch",
        id="tool-arguments-text-not-the-calls",
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


def test_an_unknown_field_is_refused_with_a_code(conversation):
    with pytest.raises(ValidationError, match="tool_cals") as raised:
        add_message(conversation, "assistant", tool_cals=[])

    assert raised.value.code == "unknown_field"
    assert not conversation.messages.exists()


# --- Reused tool-call ids and one result per call ------------------------------------

REAL = Path(__file__).resolve().parent.parent / "bench" / "data" / "real"


def test_a_reused_call_id_is_stored_and_its_result_answers_the_new_call(with_tool_call):
    first_result = add_message(with_tool_call, "tool", "post 7", tool_call_id="call_1")
    add_message(with_tool_call, "assistant", "Post 7 again, fresh.", tool_calls=[CALL])

    second = with_tool_call.messages.filter(role="assistant").last()
    second_result = add_message(with_tool_call, "tool", "post 7 (fresh)", tool_call_id="call_1")

    first_call = with_tool_call.messages.filter(role="assistant").first()
    assert first_result.tool_call_message_id == first_call.pk
    assert second_result.tool_call_message_id == second.pk
    assert second_result.tool_arguments == {"post_id": 7}


def test_a_third_result_for_a_reused_id_is_a_duplicate(with_tool_call):
    add_message(with_tool_call, "tool", "post 7", tool_call_id="call_1")
    add_message(with_tool_call, "assistant", "", tool_calls=[CALL])
    add_message(with_tool_call, "tool", "post 7 again", tool_call_id="call_1")

    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, "tool", "post 7 once more", tool_call_id="call_1")

    assert raised.value.code == "duplicate_tool_result"
    assert Message.objects.filter(role="tool").count() == 2


@pytest.mark.parametrize(
    "call",
    [
        {"name": "search", "arguments": {}},
        {"id": None, "name": "search", "arguments": {}},
    ],
    ids=["missing", "none"],
)
def test_a_call_without_an_id_gets_one_its_result_can_name(conversation, call):
    add_message(conversation, "user", "Find post 7")
    message = add_message(conversation, "assistant", "", tool_calls=[call])

    (stored,) = Message.objects.get(pk=message.pk).tool_calls
    assert re.fullmatch(r"call_[0-9a-f]{24}", stored["id"])
    result = add_message(conversation, "tool", "found", tool_call_id=stored["id"])
    assert result.tool_call_message_id == message.pk


@pytest.mark.django_db(transaction=True)
def test_six_concurrent_results_for_one_call_store_exactly_one():
    conversation = Conversation.objects.create(title="race")
    add_message(conversation, "user", "Show me post 7")
    add_message(conversation, "assistant", "", tool_calls=[CALL])
    start = threading.Barrier(6)
    codes: list[str] = []

    def store(index: int) -> None:
        start.wait()
        try:
            add_message(conversation, "tool", f"result {index}", tool_call_id="call_1")
            codes.append("stored")
        except ValidationError as error:
            codes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=store, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(codes) == ["duplicate_tool_result"] * 5 + ["stored"]
    assert conversation.messages.filter(role="tool").count() == 1


@pytest.mark.django_db
def test_the_database_refuses_a_second_result_for_one_call():
    conversation = Conversation.objects.create()
    call = Message.objects.create(conversation=conversation, role="assistant", tool_calls=[CALL])
    Message.objects.create(
        conversation=conversation, role="tool", tool_call_id="call_1", tool_call_message=call
    )

    with pytest.raises(IntegrityError, match=ONE_RESULT_PER_CALL):
        Message.objects.create(
            conversation=conversation, role="tool", tool_call_id="call_1", tool_call_message=call
        )


@pytest.mark.parametrize("path", sorted(REAL.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_real_conversation_replays_through_add_message(conversation, path):
    lines = path.read_text().splitlines()
    refused = []

    for line in lines:
        message = json.loads(line)
        fields = {key: message[key] for key in ("tool_calls", "tool_call_id") if message.get(key)}
        try:
            add_message(conversation, message["role"], message["content"], **fields)
        except ValidationError as error:
            refused.append((message["role"], message["content"], error.code))

    # Every message is stored, the model answer of cc-medgemma that was all thinking too.
    assert refused == []
    assert conversation.messages.count() == len(lines)
    results = conversation.messages.filter(role="tool")
    assert results.filter(tool_call_message__isnull=True).count() == 0


@override_settings(ASSISTANT_COMPACTION={"MAX_TOOL_CALLS_BYTES": 2000})
def test_it_refuses_tool_calls_over_the_configured_size(conversation):
    add_message(conversation, "user", "Write both files")
    calls = [{"id": f"c{i}", "name": "write", "arguments": {"text": "x" * 900}} for i in range(3)]

    with pytest.raises(ValidationError) as raised:
        add_message(conversation, "assistant", "", tool_calls=calls)

    assert raised.value.code == "tool_calls_too_large"
    assert conversation.messages.count() == 1


def test_the_limits_themselves_are_accepted(with_tool_call):
    deepest = _nested(64)  # MAX_JSON_DEPTH
    add_message(with_tool_call, "tool", "rows", tool_call_id="call_1", metadata=deepest)
    message = add_message(
        with_tool_call,
        "assistant",
        "ok",
        tool_calls=[{"id": "c" * 255, "name": "n" * 255, "arguments": {"x": 1}}],
        input_tokens=2**31 - 1,
    )

    message.refresh_from_db()
    assert (message.input_tokens, len(message.tool_calls[0]["id"])) == (2**31 - 1, 255)
    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, "user", "hi", metadata={"deeper": deepest})
    assert raised.value.code == "too_deeply_nested"


def test_a_result_for_a_long_id_is_stored_as_well_as_its_call(conversation):
    add_message(conversation, "user", "go")
    add_message(conversation, "assistant", "", tool_calls=[{**CALL, "id": "c" * 255}])

    result = add_message(conversation, "tool", "rows", tool_call_id="c" * 255)

    assert result.tool_call_id == "c" * 255


@pytest.mark.parametrize("role", ["user", "tool"])
def test_nothing_is_added_to_a_deleted_conversation(with_tool_call, role):
    type(with_tool_call).objects.filter(pk=with_tool_call.pk).update(deleted_at=timezone.now())
    before = with_tool_call.messages.count()

    with pytest.raises(ValidationError) as raised:
        add_message(with_tool_call, role, "late", tool_call_id="call_1" if role == "tool" else "")

    assert raised.value.code == "conversation_deleted"
    assert with_tool_call.messages.count() == before


@pytest.mark.parametrize("arguments", [{"post_id": 7}, '{"post_id": 7}', None])
def test_a_tool_result_may_repeat_its_calls_arguments(with_tool_call, arguments):
    result = add_message(
        with_tool_call, "tool", "rows", tool_call_id="call_1", tool_arguments=arguments
    )

    assert Message.objects.get(pk=result.pk).tool_arguments == {"post_id": 7}


def test_empty_tool_fields_on_a_user_message_are_no_fields(conversation):
    message = add_message(conversation, "user", "hi", tool_call_id="", tool_name="")

    assert (message.tool_call_id, message.tool_name) == ("", "")


@pytest.mark.django_db(transaction=True)
def test_the_stored_context_size_equals_a_recount_after_8_concurrent_writers():
    conversation = Conversation.objects.create(title="race", system_prompt="You help.")
    # A long history, so that each writer's count takes a while, as on a real conversation.
    Message.objects.bulk_create(
        Message(
            conversation=conversation,
            role="user" if n % 2 == 0 else "assistant",
            content=f"earlier {n}",
            token_estimate=40,
            original_token_estimate=40,
        )
        for n in range(3000)
    )
    writers, rounds = 8, 6
    start, done = threading.Barrier(writers), threading.Barrier(writers)
    stale: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def write(index: int) -> None:
        try:
            for turn in range(rounds):
                start.wait()
                add_message(conversation, "user", f"writer {index} turn {turn} " + "x" * 400)
                if done.wait() == 0:  # one writer compares, once every write has settled
                    stored = Conversation.objects.get(pk=conversation.pk).context_tokens
                    recount = context_size(conversation.pk)
                    if stored != recount:
                        stale.append((stored, recount))
        except BaseException as error:  # reported below
            failures.append(error)
            start.abort()
            done.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert failures == []
    assert conversation.messages.count() == 3000 + writers * rounds
    assert stale == []
