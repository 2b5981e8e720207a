"""The admin's sizes and money: the list, the inspector's header and its bar
all show the pre-call hook's size of the next request; the list, the
conversation page and the totals page show the cost module's figures."""

from __future__ import annotations

from django.contrib.auth.models import Permission

from assistant.admin.inspector import context_inspector
from assistant.admin.listing import with_list_figures
from assistant.history.state_writes import write_state
from assistant.management.commands.context_report import context_report
from assistant.models import Conversation, Message, MetadataKeys
from assistant.services import (
    add_message,
    compact_tool_results,
    context_tokens,
    emergency_compact,
    ensure_context_summary,
    fork_continuation,
    regenerate_window_summary,
    restore_originals,
)
from assistant.window import load_window, refresh_size
from tests.scenarios import staff_user, tool_heavy_conversation
from tests.test_cost import priced_conversation, two_turns


def list_size(conversation: Conversation) -> int:
    return with_list_figures(Conversation.objects.filter(pk=conversation.pk)).get().context_tokens


def split_inside_a_turn() -> Conversation:
    """A window summary whose split falls inside a turn (its user message
    kept as the anchor), a system message before the cutoff, every provider
    count stale, and a stored token ratio of 1.37."""
    conversation = Conversation.objects.create(title="split", system_prompt="You help.")
    add_message(conversation, "user", "Hello, " * 60)
    add_message(conversation, "system", "Always answer in English; dates as ISO 8601.")
    add_message(conversation, "assistant", "Hi. " * 30)
    anchor = add_message(conversation, "user", "Read the four modules, " * 20)
    first = add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "read", "arguments": {"path": "a.py"}}],
        input_tokens=900,
    )
    add_message(conversation, "tool", "def a(): pass\n" * 80, tool_call_id="c1")
    last = add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c2", "name": "read", "arguments": {"path": "b.py"}}],
        input_tokens=1300,
    )
    add_message(conversation, "tool", "def b(): pass\n" * 40, tool_call_id="c2")
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {
            MetadataKeys.COMPACTION_SUMMARY: "## Goal\n- read the modules\n" * 12,
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: first.pk + 1,
            MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID: anchor.pk,
            MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: last.pk,
            MetadataKeys.TOKEN_RATIO: 1.37,
        },
    )
    refresh_size(conversation.pk)  # as the shift that stores such a split does
    conversation.refresh_from_db()
    return conversation


def test_the_list_the_header_and_the_bar_show_one_size_after_a_split_inside_a_turn(db):
    conversation = split_inside_a_turn()

    size = context_tokens(conversation)
    inspector = context_inspector(conversation)

    # Before: the list left out the ratio, the system message and the anchor,
    # and the bar summed the unscaled estimates.
    # Estimates: system part with the system message 14, summary 81, the
    # anchor 115, the call 16 and its result 140: 366 tokens, times 1.37.
    assert size == 502
    assert list_size(conversation) == size
    assert inspector["total"] == size
    assert sum(segment["tokens"] for segment in inspector["segments"]) == size
    assert report_parts(conversation) == (size, size)  # context_report summed 366


def test_the_list_the_header_and_the_bar_show_one_size_with_a_provider_count(db):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    add_message(conversation, "assistant", "Post 43 is fine.", input_tokens=4321)
    add_message(conversation, "user", "Thanks.")

    size = context_tokens(conversation)
    inspector = context_inspector(conversation)

    assert size == 4321 + 4 + 2  # the provider's count, then our estimates of what followed
    assert list_size(conversation) == size
    assert inspector["total"] == size
    assert sum(segment["tokens"] for segment in inspector["segments"]) == size
    assert report_parts(conversation) == (size, size)


def test_a_message_stored_after_a_split_inside_a_turn_stores_the_hooks_size(db):
    # add_message measures the context without loading the messages' text: the
    # system message's text, the anchor and the stored ratio must still count.
    conversation = split_inside_a_turn()
    add_message(conversation, "user", "Now the fifth module, please.")

    size = context_tokens(conversation)
    assert size == load_window(conversation.pk).context_tokens() > 502
    assert list_size(conversation) == size


def report_parts(conversation: Conversation) -> tuple[int, int]:
    """(manage.py context_report's total, the sum of its parts)."""
    tokens = context_report(conversation)["tokens"]
    return tokens["total"], sum(value for name, value in tokens.items() if name != "total")


def test_the_list_page_shows_cost_and_saving_and_events_link_their_conversation(db, client):
    conversation, _ = priced_conversation()
    staff = staff_user()
    staff.user_permissions.add(Permission.objects.get(codename="view_compactionevent"))
    client.force_login(staff)

    listing = client.get("/admin/assistant/conversation/").content.decode()
    events = client.get("/admin/assistant/compactionevent/").content.decode()

    # $0.001553 chat + $0.000200 summarizer; sending everything $0.002164
    # (the third call with the 163 tokens the summary removed): 19% saved.
    assert '<span class="two-lines">$0.0018 ·</span><span class="two-lines">19%</span>' in listing
    url = f"/admin/assistant/conversation/{conversation.pk}/change/"
    assert f'<a href="{url}">#{conversation.pk} priced</a>' in events
    assert "100 / 20" in events  # summarizer tokens in / out
    assert Message.objects.filter(conversation=conversation).count() == 6


def one_size(conversation: Conversation) -> tuple[int, int, int, int]:
    """(the list's figure, the inspector's total, context_report's total, the
    size the pre-call hook decides on)."""
    conversation.refresh_from_db()
    decided = load_window(conversation.pk).context_tokens()
    report = context_report(conversation)["tokens"]["total"]
    return list_size(conversation), context_inspector(conversation)["total"], report, decided


def test_the_list_the_inspector_the_report_and_the_hook_agree_after_every_kind_of_write(db):
    conversation, _ = tool_heavy_conversation()
    sizes = {"messages": one_size(conversation)}
    add_message(conversation, "user", "And post 43?")
    add_message(conversation, "assistant", "Post 43 is fine.", input_tokens=4321)
    sizes["a provider count"] = one_size(conversation)
    compact_tool_results(conversation, include_current_turn=True, min_chars=0)
    sizes["compaction"] = one_size(conversation)
    restore_originals(conversation)
    sizes["restore"] = one_size(conversation)
    regenerate_window_summary(conversation, keep_last=4)
    sizes["a shift"] = one_size(conversation)
    emergency_compact(conversation, level=2)
    sizes["emergency"] = one_size(conversation)
    ensure_context_summary(conversation)
    sizes["the hook"] = one_size(conversation)
    fork = fork_continuation(conversation)
    sizes["a fork"] = one_size(fork)
    add_message(fork, "user", "Go on.")
    sizes["a fork's message"] = one_size(fork)

    assert {what: len(set(four)) for what, four in sizes.items()} == dict.fromkeys(sizes, 1)
    # The writes did change the size: the figures followed them.
    assert len({four[0] for four in sizes.values()}) >= 5


def test_implausible_usage_reads_as_an_estimate_with_its_reason(db, client):
    # input_tokens alone: 3 and 100 where the app counts 1,003 and 2,103.
    conversation = two_turns("input only", [{"input_tokens": 3}, {"input_tokens": 100}])
    client.force_login(staff_user())

    listing = client.get("/admin/assistant/conversation/").content.decode()
    page = client.get(f"/admin/assistant/conversation/{conversation.pk}/change/").content.decode()

    # (1,003 x 3.75 + 1,003 x 0.30 + 1,100 x 3.75 + 200 x 15) per million: $0.0112, nothing saved.
    assert (
        '<span class="two-lines">≈$0.0112 ·</span><span class="two-lines">0% (estimated)</span>'
        in listing
    )
    assert "99%" not in listing
    (call,) = Message.objects.filter(conversation=conversation, input_tokens=3)
    assert (
        f'<p class="errornote" id="cost-estimated">The cost is estimated from the app&#x27;s '
        f"count: message #{call.pk} records a prompt of 3 tokens where the app counts 1,003"
    ) in page
