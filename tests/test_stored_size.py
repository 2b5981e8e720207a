"""The size a conversation stores for the admin list (Conversation.context_tokens)
is added to by each stored message rather than measured again, and equals a
recount of the window after every kind of message."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assistant.history.state_writes import write_state
from assistant.models import Conversation, MetadataKeys
from assistant.services import add_message
from assistant.window import load_window, measure_size
from assistant.window.loading import MIN_JUDGED_ESTIMATE

CALL = {"id": "call_1", "name": "read_file", "arguments": {"path": "a.py"}}
LONG = "word " * 2_000  # about 2,500 tokens: over MIN_JUDGED_ESTIMATE


def stored(conversation: Conversation) -> tuple[int, int | None, bool]:
    return Conversation.objects.values_list(
        "context_tokens", "context_estimate", "context_counted"
    ).get(pk=conversation.pk)


def assert_recounted(conversation: Conversation) -> None:
    recount = measure_size(conversation.pk)
    assert stored(conversation) == tuple(recount)
    assert recount.tokens == load_window(conversation.pk).context_tokens()


# Outside a test's transaction: the statements a host's add_message runs.
@pytest.mark.django_db(transaction=True)
def test_a_message_after_a_provider_count_adds_to_the_size_in_one_update(conversation):
    add_message(conversation, "user", "Read a.py")
    add_message(conversation, "assistant", "", tool_calls=[CALL], input_tokens=900)
    add_message(conversation, "tool", "print(1)", tool_call_id="call_1")
    before = stored(conversation)[0]

    with CaptureQueriesContext(connection) as queries:
        message = add_message(conversation, "user", "And b.py?")

    # The INSERT, then the one UPDATE that adds: no transaction of its own.
    assert [q["sql"].split()[0] for q in queries] == ["INSERT", "UPDATE"]
    assert stored(conversation)[0] == before + message.token_estimate
    assert_recounted(conversation)


@pytest.mark.django_db(transaction=True)
def test_a_message_measures_the_window_when_the_stored_size_cannot_be_added_to(conversation):
    add_message(conversation, "user", "Read a.py")
    conversation.system_prompt = "You help, briefly."
    conversation.save()  # the system prompt may have changed: the basis is unknown

    with CaptureQueriesContext(connection) as queries:
        add_message(conversation, "user", "Hello?")

    # The INSERT; the conditional UPDATE matches nothing; in a transaction, the row's
    # lock (an UPDATE), the conversation and the rows' sizes read, the size stored.
    assert [q["sql"].split()[0] for q in queries] == [
        "INSERT",
        "UPDATE",
        "BEGIN",
        "UPDATE",
        "SELECT",
        "SELECT",
        "UPDATE",
        "COMMIT",
    ]
    assert_recounted(conversation)


def test_the_stored_size_equals_a_recount_after_every_kind_of_message(conversation):
    steps = [
        lambda: add_message(conversation, "user", "Read a.py"),
        # A count below MIN_JUDGED_ESTIMATE's reach: plausible whatever its size.
        lambda: add_message(conversation, "assistant", "", tool_calls=[CALL], input_tokens=3),
        lambda: add_message(conversation, "tool", LONG, tool_call_id="call_1"),
        # Under half the estimate of a request over MIN_JUDGED_ESTIMATE: implausible.
        lambda: add_message(conversation, "assistant", "Done.", input_tokens=100),
        lambda: add_message(conversation, "user", "Again"),  # not counted: measured
        lambda: add_message(
            conversation,
            "assistant",
            "Done again.",
            input_tokens=2_000,
            cache_read_tokens=1_000,
            cache_write_tokens=10,
        ),
        lambda: add_message(conversation, "user", "Thanks"),
        lambda: add_message(conversation, "system", "The user is an admin."),
        lambda: add_message(conversation, "assistant", "You are welcome."),  # no usage
        lambda: write_state(  # a compaction makes every count so far stale
            Conversation.objects.filter(pk=conversation.pk),
            {MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: conversation.messages.latest("id").pk},
        ),
        lambda: add_message(conversation, "user", "One more"),
        lambda: add_message(conversation, "assistant", "Sure.", input_tokens=3_400),
        lambda: add_message(conversation, "user", "Last"),
    ]
    counted = []
    for step in steps:
        step()
        if stored(conversation)[1] is not None:  # write_state leaves it unknown
            assert_recounted(conversation)
        counted.append(stored(conversation)[2])

    assert counted == [
        False,
        True,
        True,
        False,
        False,
        True,
        True,
        True,
        True,
        True,  # unknown basis after the epoch's write (context_estimate NULL)
        False,
        True,
        True,
    ]


@pytest.mark.parametrize(("below_half", "counted"), [(0, True), (1, False)])
def test_a_count_at_the_plausibility_bound_is_judged_as_a_recount_judges_it(
    conversation, below_half, counted
):
    add_message(conversation, "user", LONG)
    estimate = stored(conversation)[1]
    assert estimate >= MIN_JUDGED_ESTIMATE  # the count is judged

    add_message(conversation, "assistant", "Read.", input_tokens=-(-estimate // 2) - below_half)

    assert stored(conversation)[2] is counted
    assert_recounted(conversation)
