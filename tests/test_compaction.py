"""Strategy 1: tool-result compaction and dedup, as a view over the history."""

import pytest
from django.test import override_settings

from assistant.models import CompactionEvent, Message
from assistant.services import compact_tool_results, restore_originals
from assistant.window import STUB, stub_text
from tests.builders import html, tool_turn

pytestmark = pytest.mark.django_db


def originals(conversation):
    return dict(conversation.messages.values_list("id", "content"))


def model_view(conversation):
    return {
        m.pk: m.model_content
        for m in Message.objects.filter(conversation=conversation).model_view()
    }


def test_it_truncates_large_consumed_results_and_keeps_small_ones(conversation):
    big = html(6000, marker="Post 42 title: 'Hello World' at /posts/42 ")
    turn = tool_turn(
        conversation,
        "Show post 42 and count the comments",
        [("get_blog_post", {"id": 42}, big), ("run_sql", {"q": "select 1"}, "count\n7")],
    )
    big_result, small_result = turn[2], turn[3]

    assert compact_tool_results(conversation) == 1

    big_result.refresh_from_db()
    small_result.refresh_from_db()
    assert big_result.compaction == "truncated"
    assert big_result.compacted_content.startswith(
        "[Tool result compacted: showing the first 799 of 6,000 characters. "
        f"The full original is stored and can be restored (ref m{big_result.pk}).]\n"
        "<article>Post 42"
    )
    assert big_result.content == big  # the original is intact
    assert big_result.token_estimate == -(-len(big_result.compacted_content) // 4)
    assert big_result.original_token_estimate == 1500
    assert small_result.compaction == ""
    event = CompactionEvent.objects.get(kind="tool_results")
    assert (event.messages_affected, event.tokens_before) == (1, 1500)


def test_it_leaves_the_results_of_an_unfinished_turn_alone(conversation):
    tool_turn(conversation, "first", [("get_blog_post", {"id": 1}, html(3000))])
    from assistant.services import add_message

    add_message(conversation, "user", "now post 2")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "pending", "name": "get_blog_post", "arguments": {"id": 2}}],
    )
    in_progress = add_message(conversation, "tool", html(3000), tool_call_id="pending")

    assert compact_tool_results(conversation) == 1
    in_progress.refresh_from_db()
    assert in_progress.compaction == ""

    # Never read by the model yet (no assistant message after it): untouched.
    assert compact_tool_results(conversation, include_current_turn=True) == 0
    add_message(conversation, "assistant", "Reading it.")

    assert compact_tool_results(conversation, include_current_turn=True) == 1
    in_progress.refresh_from_db()
    assert in_progress.compaction == "truncated"


def test_dedup_keeps_the_newest_and_treats_reordered_arguments_as_identical(conversation):
    rows = "id | title | status\n" + "17 | Spring launch notes | draft\n" * 5
    first = tool_turn(conversation, "a", [("run_sql", {"q": "select *", "db": "blog"}, rows)])
    other = tool_turn(conversation, "b", [("run_sql", {"q": "select 2", "db": "blog"}, "B")])
    second = tool_turn(conversation, "c", [("run_sql", {"db": "blog", "q": "select *"}, rows)])

    assert compact_tool_results(conversation) == 1

    view = model_view(conversation)
    assert (
        view[first[2].pk]
        == stub_text(first[2].pk)
        == (f"[Already retrieved earlier — omitted to reduce context (ref m{first[2].pk})]")
    )
    assert view[other[2].pk] == "B"
    assert view[second[2].pk] == rows
    assert CompactionEvent.objects.get(kind="dedup").messages_affected == 1


def test_dedup_never_stubs_a_result_shorter_than_the_stub(conversation):
    # An empty or one-word result of a repeated call: the stub would make it longer.
    for turn, result in enumerate(["", "ok", "", "ok"]):
        tool_turn(conversation, str(turn), [("run_tests", {"path": "tests/"}, result)])

    assert compact_tool_results(conversation) == 0

    assert not CompactionEvent.objects.filter(conversation=conversation).exists()
    assert not any(STUB[:-1] in text for text in model_view(conversation).values())


def test_running_it_twice_changes_nothing(conversation):
    tool_turn(conversation, "a", [("get_blog_post", {"id": 1}, html(4000))])
    tool_turn(conversation, "b", [("get_blog_post", {"id": 1}, html(4000))])
    assert compact_tool_results(conversation) == 2
    before = list(conversation.messages.values())
    events = CompactionEvent.objects.count()

    assert compact_tool_results(conversation) == 0

    assert list(conversation.messages.values()) == before
    assert CompactionEvent.objects.count() == events


def test_every_original_can_be_restored_verbatim(conversation):
    tool_turn(conversation, "a", [("get_blog_post", {"id": 1}, html(4000, "A"))])
    tool_turn(conversation, "b", [("get_blog_post", {"id": 1}, html(4000, "B"))])
    saved = originals(conversation)
    compact_tool_results(conversation)
    assert conversation.messages.exclude(compaction="").count() == 2

    assert restore_originals(conversation) == 2

    assert model_view(conversation) == saved
    assert originals(conversation) == saved
    # Restored messages stay verbatim: the next run does not compact them again.
    assert compact_tool_results(conversation) == 0


@override_settings(ASSISTANT_COMPACTION={"TOOL_POLICIES": {"run_sql": "keep"}})
def test_a_kept_tool_is_never_compacted_or_stubbed(conversation):
    tool_turn(conversation, "a", [("run_sql", {"q": "x"}, "r" * 5000)])
    tool_turn(conversation, "b", [("run_sql", {"q": "x"}, "r" * 5000)])

    assert compact_tool_results(conversation) == 0
    assert not conversation.messages.exclude(compaction="").exists()


@override_settings(ASSISTANT_COMPACTION={"TOOL_POLICIES": {"fetch_url": "summarize"}})
def test_a_summarize_policy_stores_a_summary_marked_as_such(conversation):
    page = "Release notes for v2.4.1 at https://example.org/notes. " * 100
    turn = tool_turn(conversation, "read it", [("fetch_url", {"url": "https://example.org"}, page)])

    assert compact_tool_results(conversation) == 1

    result = Message.objects.get(pk=turn[2].pk)
    assert result.compaction == "summarized"
    assert result.compacted_content.startswith(
        f"[Summary of a {len(page):,}-character fetch_url result; the full original is stored"
    )
    assert "## Critical context" in result.compacted_content
    assert "https://example.org/notes" in result.compacted_content
    assert result.content == page


def test_min_chars_zero_compacts_every_result_that_gets_shorter(conversation):
    turn = tool_turn(
        conversation, "a", [("run_sql", {"q": "x"}, "tiny"), ("run_sql", {"q": "y"}, html(1200))]
    )

    assert compact_tool_results(conversation, min_chars=0) == 1
    # A result shorter than the kept head would only grow with a marker: left alone.
    assert Message.objects.get(pk=turn[2].pk).compaction == ""
    assert Message.objects.get(pk=turn[3].pk).compaction == "truncated"


def test_truncation_keeps_the_key_sentences_from_beyond_the_head(conversation):
    tail_fact = "\nOrder ORD-2024-0042 failed with HTTP 503 at /var/log/shop.log"
    result = tool_turn(conversation, "a", [("fetch_url", {"u": 1}, html(5000) + tail_fact)])[2]

    compact_tool_results(conversation)

    compacted = Message.objects.get(pk=result.pk).compacted_content
    details = compacted.split("[Key details further in the original:", 1)[1]
    assert details == "\nOrder ORD-2024-0042 failed with HTTP 503 at /var/log/shop.log\n]"


def test_each_compaction_logs_one_structured_line_without_content(conversation, caplog):
    secret_text = "<p>CONFIDENTIAL draft of post 9</p>" * 100
    tool_turn(conversation, "a", [("get_blog_post", {"id": 9}, secret_text)])

    with caplog.at_level("INFO", logger="assistant.events"):
        compact_tool_results(conversation)

    (record,) = [r for r in caplog.records if r.name == "assistant.events"]
    assert record.event == {
        "event": "tool_results",
        "conversation_id": conversation.pk,
        "tokens_before": 875,  # 3,500 chars / 4
        "tokens_after": record.event["tokens_after"],
        "messages_affected": 1,
        "duration_ms": record.event["duration_ms"],
    }
    assert record.event["tokens_after"] < 875
    assert "CONFIDENTIAL" not in caplog.text


class Killed(BaseException):
    """Stands for the worker being killed (not an Exception: nothing catches it)."""


@override_settings(ASSISTANT_COMPACTION={"TOOL_POLICIES": {"fetch_url": "summarize"}})
def test_a_summarize_policy_commits_each_result_so_a_killed_run_keeps_its_work(
    conversation, monkeypatch
):
    turn = tool_turn(
        conversation, "a", [("fetch_url", {"u": n}, html(3000, f"page {n}")) for n in range(3)]
    )
    calls = []

    def summarize(transcript, **kwargs):
        calls.append(transcript)
        if len(calls) == 3:
            raise Killed
        from assistant.providers.offline.provider import OfflineProvider

        return OfflineProvider().summarize(transcript)

    monkeypatch.setattr("assistant.tool_results.compaction.llm.summarize", summarize)

    with pytest.raises(Killed):
        compact_tool_results(conversation)

    kinds = [Message.objects.get(pk=m.pk).compaction for m in turn[2:5]]
    assert kinds == ["summarized", "summarized", ""]
    assert CompactionEvent.objects.filter(conversation=conversation).count() == 2


def test_the_worker_reads_only_results_it_has_not_looked_at(conversation):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from assistant.tool_results.compaction import prepare_tool_results

    for n in range(30):
        tool_turn(conversation, f"q{n}", [("get_blog_post", {"id": n}, html(3000))])
    assert prepare_tool_results(conversation) == 30

    tool_turn(conversation, "one more", [("get_blog_post", {"id": 99}, html(3000))])
    with CaptureQueriesContext(connection) as queries:
        assert prepare_tool_results(conversation) == 1

    # Only the new result's text is read, and no query measures every result.
    texts = [q["sql"] for q in queries.captured_queries if '"content"' in q["sql"]]
    assert len(texts) == 1
    assert not any("LENGTH(" in q["sql"].upper() for q in queries.captured_queries)


def test_truncation_lists_the_names_the_preview_does_not_show(conversation):
    source = "".join(f"def handler_number_{n}(request):\n    return None\n" for n in range(60))
    result = tool_turn(conversation, "a", [("read_file", {"path": "app/views.py"}, source)])[2]

    with override_settings(ASSISTANT_COMPACTION={"TRUNCATION_NAMES_MAX_CHARS": 400}):
        compact_tool_results(conversation)

    compacted = Message.objects.get(pk=result.pk).compacted_content
    preview, names = compacted.split("\n[Names further in the original: ", 1)
    listed = names.removesuffix("]").split(", ")
    # The names past the head, in the original's order, none the preview already shows,
    # as many as the budget holds.
    assert listed[0] == next(f"handler_number_{n}" for n in range(60) if f"_{n}(" not in preview)
    assert all(name not in preview for name in listed)
    assert 400 - len(", handler_number_59") < len(", ".join(listed)) <= 400
    assert "handler_number_59" not in compacted  # beyond the budget: one recall away


def test_no_names_are_listed_with_a_zero_budget(conversation):
    source = "".join(f"def handler_number_{n}(request):\n    return None\n" for n in range(60))
    result = tool_turn(conversation, "a", [("read_file", {"path": "app/views.py"}, source)])[2]

    with override_settings(ASSISTANT_COMPACTION={"TRUNCATION_NAMES_MAX_CHARS": 0}):
        compact_tool_results(conversation)

    assert "[Names further" not in Message.objects.get(pk=result.pk).compacted_content
