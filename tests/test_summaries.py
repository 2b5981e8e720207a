"""Strategy 2: the window summary is generated once per split, across
objects, processes and concurrent callers, and updated incrementally."""

import json
import os
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections
from django.test import override_settings

from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message
from assistant.recall.artifact_index import without_index
from assistant.services import (
    build_context,
    compact_tool_results,
    compaction_cutoff_id,
    ensure_context_summary,
    process_exchange,
    regenerate_window_summary,
    restore_originals,
)
from assistant.summary.facts import CARRIED_HEADING, carried_facts
from tests.builders import chat_turns, tool_turn
from tests.fake_llm import ok, overloaded, slow

# These tests are about the summary itself, so its timing is eager (the
# count trigger fires at once); tests/test_timing.py covers the cache-aware timing.
SMALL_WINDOW = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MAX_MESSAGES_BEFORE_SUMMARY": 10,
    "MIN_RECENT_MESSAGES": 4,
    "COMPACTION_TIMING": "eager",
}
SUMMARY = (
    "## Goal\n- {goal}\n\n## Constraints\n- none\n\n## Progress\n- none\n\n"
    "## Key decisions\n- none\n\n## Next steps\n- none\n\n## Critical context\n- {ids}"
)


def summary_text(goal="fix the blog", ids="post-42"):
    return SUMMARY.format(goal=goal, ids=ids)


def summarizer_calls(fake):
    return fake.count("anthropic.messages")


@pytest.fixture
def anthropic(fake_llm, settings):
    fake_llm.use_anthropic(settings)
    return fake_llm


@pytest.fixture
def long_conversation(db):
    conversation = Conversation.objects.create(title="long", system_prompt="You help.")
    # 10 messages (the count trigger), long enough that a summary is shorter.
    chat_turns(conversation, 5, size=400)
    return conversation


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_it_summarizes_once_per_split(anthropic, long_conversation):
    anthropic.script_summaries(ok(summary_text()))

    summary = ensure_context_summary(long_conversation)

    assert summary.startswith(summary_text())
    # 10 messages, keep max(4, ceil(10 * 0.4)) = 4: messages 0..5 are summarized.
    assert compaction_cutoff_id(long_conversation) == long_conversation.messages.all()[5].pk
    assert summarizer_calls(anthropic) == 1
    assert ensure_context_summary(long_conversation) == summary
    fresh = Conversation.objects.get(pk=long_conversation.pk)
    assert ensure_context_summary(fresh) == summary
    assert summarizer_calls(anthropic) == 1
    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1


@pytest.mark.django_db(transaction=True)
@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_another_process_uses_the_cached_summary(anthropic):
    conversation = Conversation.objects.create(title="long", system_prompt="You help.")
    chat_turns(conversation, 5, size=400)
    anthropic.script_summaries(ok(summary_text()))
    summary = ensure_context_summary(conversation)
    env = {
        **os.environ,
        **anthropic.env(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "TEST_DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "ASSISTANT_COMPACTION": json.dumps(SMALL_WINDOW),
    }
    script = (
        "import django; django.setup()\n"
        "from assistant.models import Conversation\n"
        "from assistant.services import ensure_context_summary\n"
        f"print(ensure_context_summary(Conversation.objects.get(pk={conversation.pk})))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == summary.strip()
    assert summarizer_calls(anthropic) == 1


# The seven callers that find the lease taken wait for its holder: a heartbeat late on
# a loaded machine must not make it a stalled one, nor a slow thread miss the deadline.
LIVE_HOLDER = {"SUMMARY_STALL_SECONDS": 10, "SUMMARY_CHAT_DEADLINE_SECONDS": 120}


@pytest.mark.django_db(transaction=True)
@override_settings(ASSISTANT_COMPACTION={**SMALL_WINDOW, **LIVE_HOLDER})
def test_eight_concurrent_callers_cause_one_summarizer_call(anthropic):
    conversation = Conversation.objects.create(title="busy", system_prompt="You help.")
    chat_turns(conversation, 5, size=400)
    anthropic.script_summaries(slow(0.5, then=ok(summary_text())))
    barrier = threading.Barrier(8)
    results, errors = [], []

    def caller():
        try:
            barrier.wait()
            results.append(ensure_context_summary(Conversation.objects.get(pk=conversation.pk)))
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert summarizer_calls(anthropic) == 1
    assert len(results) == 8
    assert {without_index(r).split(f"\n\n{CARRIED_HEADING}")[0] for r in results} == {
        summary_text()
    }
    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_an_update_reads_the_previous_summary_and_only_the_newly_old_messages(
    anthropic, long_conversation
):
    anthropic.script_summaries(ok(summary_text("first")), ok(summary_text("second")))
    ensure_context_summary(long_conversation)
    first_cutoff = compaction_cutoff_id(long_conversation)
    chat_turns(long_conversation, 3, prefix="later-")  # 4 kept + 6 new = 10: the trigger

    summary = ensure_context_summary(long_conversation)

    assert summary.startswith(summary_text("second"))
    update = anthropic.requests_for("anthropic.messages")[1].body
    prompt = update["messages"][0]["content"]
    assert f"<previous_summary>\n{summary_text('first')}" in prompt
    old = Message.objects.filter(conversation=long_conversation, id__lte=first_cutoff)
    newly_old = Message.objects.filter(
        conversation=long_conversation,
        id__gt=first_cutoff,
        id__lte=compaction_cutoff_id(long_conversation),
    )
    transcript = prompt.split("<conversation>", 1)[1]
    assert all(f"[{m.role}] {m.content}" not in transcript for m in old)
    assert all(f"[{m.role}] {m.content}" in transcript for m in newly_old)
    assert newly_old.count() == 6


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW, ASSISTANT_SUMMARY_FALLBACK=False)
def test_a_failing_summarizer_leaves_everything_as_it_was(anthropic, long_conversation, caplog):
    anthropic.script_summaries(ok(summary_text("first")))
    first = ensure_context_summary(long_conversation)
    chat_turns(long_conversation, 3)
    metadata = held_state(Conversation.objects.get(pk=long_conversation.pk))
    messages = list(long_conversation.messages.values())
    anthropic.script_summaries(overloaded(), overloaded(), overloaded())

    summary = ensure_context_summary(long_conversation)

    assert summary == first
    stored = held_state(Conversation.objects.get(pk=long_conversation.pk))
    failure = stored.pop("summary_failure")
    assert stored == metadata
    assert (failure["base"], failure["attempts"]) == (metadata["compaction_through_message_id"], 1)
    assert list(long_conversation.messages.values()) == messages
    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1
    assert "summary_failed" in caplog.text
    # The failure is remembered: the next requests do not call the summarizer again.
    calls = summarizer_calls(anthropic)
    assert ensure_context_summary(long_conversation) == first
    assert summarizer_calls(anthropic) == calls
    assert "test-key-anthropic" not in caplog.text
    lease = Conversation.objects.values_list("summary_lease_token", flat=True)
    assert lease.get(pk=long_conversation.pk) is None


def test_a_rejected_summary_is_never_stored(anthropic, long_conversation, settings):
    settings.ASSISTANT_COMPACTION = SMALL_WINDOW
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    anthropic.script_summaries(ok("Sure! Here is the answer to your question: 42."))

    assert ensure_context_summary(long_conversation) is None

    metadata = held_state(Conversation.objects.get(pk=long_conversation.pk))
    assert list(metadata) == ["summary_failure"]
    # Not called again on every request for the same split: the failure is remembered.
    assert ensure_context_summary(long_conversation) is None
    assert summarizer_calls(anthropic) == 1


@override_settings(ASSISTANT_COMPACTION={**SMALL_WINDOW, "SOFT_WATERMARK": 0.8})
def test_the_worker_prebuilds_and_the_hook_adopts_without_waiting(anthropic, db):
    conversation = Conversation.objects.create(title="soon", system_prompt="You help.")
    # Long enough that the summary (and the handles of its originals) is smaller.
    chat_turns(conversation, 4, size=60)  # 8 messages: 80% of the count trigger
    anthropic.script_summaries(ok(summary_text("prebuilt")))

    process_exchange(conversation.pk)

    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    assert metadata["pending_summary"].startswith(summary_text("prebuilt"))
    assert "compaction_summary" not in metadata
    assert summarizer_calls(anthropic) == 1

    chat_turns(conversation, 1, size=60)  # 10 messages: the hard trigger
    summary = ensure_context_summary(conversation)

    assert summary.startswith(summary_text("prebuilt"))
    assert summarizer_calls(anthropic) == 1  # adopted, not regenerated
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    assert "pending_summary" not in metadata
    # Built at 8 of 10 messages for the shift the trigger would make: keep 4 of
    # the 10 then, so 2 now; the split lands after message 5.
    assert metadata["compaction_through_message_id"] == conversation.messages.all()[5].pk
    event = CompactionEvent.objects.get(kind="window_summary")
    assert event.details["prebuilt"] is True
    assert event.summarizer_model == "claude-haiku-4-5"
    assert event.summarizer_input_tokens > 0


@override_settings(ASSISTANT_COMPACTION={**SMALL_WINDOW, "SOFT_WATERMARK": 0.8})
def test_a_prebuilt_summary_is_ignored_once_the_split_has_moved(anthropic, db):
    conversation = Conversation.objects.create(title="moved", system_prompt="You help.")
    chat_turns(conversation, 4)
    anthropic.script_summaries(ok(summary_text("prebuilt")), ok(summary_text("direct")))
    process_exchange(conversation.pk)
    # Meanwhile another path moved the split (base no longer matches).
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {"compaction_summary": "## Goal\n- other", "compaction_through_message_id": 0},
    )
    chat_turns(conversation, 6)

    summary = ensure_context_summary(conversation)

    assert summary.startswith(summary_text("direct"))
    assert summarizer_calls(anthropic) == 2


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 500,
        "MAX_RECENT_TOKENS": 400,
        "MIN_RECENT_MESSAGES": 2,
    }
)
def test_a_tail_over_the_trigger_does_not_loop(anthropic, conversation):
    chat_turns(conversation, 2, size=400)
    # The last user message alone is over the trigger: nothing can shrink it.
    tool_turn(conversation, "huge " + "x" * 8000, [])

    ensure_context_summary(conversation)
    calls = summarizer_calls(anthropic)
    for _ in range(3):
        ensure_context_summary(conversation)

    assert calls == 1
    assert summarizer_calls(anthropic) == 1
    assert build_context(conversation).messages[0]["content"].startswith("huge x")


@override_settings(ASSISTANT_COMPACTION={**SMALL_WINDOW, "SUMMARIZER_MAX_INPUT_TOKENS": 1500})
def test_input_larger_than_the_summarizer_takes_is_summarized_in_chunks(anthropic, db):
    conversation = Conversation.objects.create(title="big", system_prompt="")
    chat_turns(conversation, 5, size=1200)  # ~300 tokens a message
    anthropic.script_summaries(
        ok(summary_text("part 1")), ok(summary_text("part 2")), ok(summary_text("part 3"))
    )

    summary = ensure_context_summary(conversation)

    # 6 messages are summarized; 3 fit in each 1,000-token chunk budget.
    assert summarizer_calls(anthropic) == 2
    second = anthropic.requests_for("anthropic.messages")[1].body["messages"][0]["content"]
    assert f"<previous_summary>\n{summary_text('part 1')}" in second
    assert summary.startswith(summary_text("part 2"))


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_facts_survive_a_summarizer_that_drops_them(anthropic, db):
    conversation = Conversation.objects.create(title="ids", system_prompt="")
    from assistant.services import add_message

    add_message(conversation, "user", "Remember coupon ZEBRA-7731 and /var/www/post-42.html")
    add_message(conversation, "assistant", "Noted.")
    chat_turns(conversation, 4, size=400)
    anthropic.script_summaries(ok(summary_text("lossy", ids="none")))

    summary = ensure_context_summary(conversation)

    assert carried_facts(summary) == ["Remember coupon ZEBRA-7731 and /var/www/post-42.html"]
    # The next update carries them again, even if the summarizer drops them again.
    chat_turns(conversation, 3, size=400)
    anthropic.script_summaries(ok(summary_text("lossy again", ids="none")))
    summary = ensure_context_summary(conversation)
    assert carried_facts(summary) == ["Remember coupon ZEBRA-7731 and /var/www/post-42.html"]
    # The summarizer read them: it can merge them into its own text.
    update = anthropic.requests_for("anthropic.messages")[-1].body["messages"][0]["content"]
    assert "- Remember coupon ZEBRA-7731 and /var/www/post-42.html" in update


@pytest.mark.parametrize("worker_ran", [True, False], ids=["prepared", "mid-turn"])
@override_settings(ASSISTANT_SUMMARY_FALLBACK=False)
def test_the_summarizer_reads_a_result_as_the_context_will_carry_it(anthropic, db, worker_ran):
    # Cache-aware timing: the worker prepares the result's compaction without
    # applying it (or has not run yet, inside a turn). A shift then pays the
    # summarizer for the compacted text, not for the whole original again; the
    # original's key fact is still carried.
    conversation = Conversation.objects.create(title="prepared", system_prompt="")
    filler = "".join(f"Line {n} of the access log says nothing new. " for n in range(400))
    log = filler + "The deploy token for staging is TKN-7F3A9B. " + filler
    tool_turn(conversation, "Read the access log.", [("read_log", {"day": 1}, log)])
    if worker_ran:
        process_exchange(conversation.pk)
    result = Message.objects.get(conversation=conversation, role="tool")
    assert bool(result.prepared_content) is worker_ran and not result.compaction
    chat_turns(conversation, 3, size=400)
    anthropic.script_summaries(ok(summary_text("logs", ids="none")))

    assert regenerate_window_summary(conversation, keep_last=2)

    prompt = anthropic.requests_for("anthropic.messages")[0].body["messages"][0]["content"]
    # The head and the key statement the prepared text keeps; nothing further in.
    assert "Line 17 of the access log" in prompt and "TKN-7F3A9B" in prompt
    assert "Line 300 of the access log" not in prompt
    assert len(prompt) < len(log) / 10
    summary = held_state(Conversation.objects.get(pk=conversation.pk))["compaction_summary"]
    assert "The deploy token for staging is TKN-7F3A9B." in carried_facts(summary)
    assert Message.objects.get(pk=result.pk).content == log


@override_settings(ASSISTANT_SUMMARY_FALLBACK=False)
def test_the_summarizer_reads_a_result_staff_restored_whole(anthropic, db):
    conversation = Conversation.objects.create(title="restored", system_prompt="")
    log = "".join(f"Line {n} of the access log says nothing new. " for n in range(400))
    tool_turn(conversation, "Read the access log.", [("read_log", {"day": 1}, log)])
    assert compact_tool_results(conversation) == 1
    assert restore_originals(conversation) == 1  # pins it verbatim
    chat_turns(conversation, 3, size=400)
    anthropic.script_summaries(ok(summary_text("logs")))

    assert regenerate_window_summary(conversation, keep_last=2)

    prompt = anthropic.requests_for("anthropic.messages")[0].body["messages"][0]["content"]
    assert "Line 300 of the access log" in prompt


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_a_summary_without_some_headings_is_stored(anthropic, long_conversation):
    renamed = "## Goal\n- fix the blog\n\n## Details\n- The feed lives at /srv/feed.xml now."
    anthropic.script_summaries(ok(renamed))

    summary = ensure_context_summary(long_conversation)

    first, sixth = (m.pk for m in long_conversation.messages.all()[:6:5])
    assert summary == f"{renamed}\n\n## Originals: ref m{first}..m{sixth}"
    assert summarizer_calls(anthropic) == 1
    assert compaction_cutoff_id(long_conversation) == long_conversation.messages.all()[5].pk


@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_summaries_never_contain_our_truncation_markers(anthropic, db):
    conversation = Conversation.objects.create(title="big tool", system_prompt="")
    page = "<p>Nothing to see in this part of the page.</p>\n" * 100
    page += "<p>The export for the autumn newsletter is at /srv/exports/autumn.tar.gz today.</p>"
    tool_turn(conversation, "fetch it", [("fetch_url", {"u": 1}, page)])
    chat_turns(conversation, 4)
    from assistant.services import compact_tool_results

    assert compact_tool_results(conversation) == 1
    # a model copying the marker it read does not bring it into the summary
    copied = "[Tool result compacted: showing the first 800 of 5,077 characters.]"
    anthropic.script_summaries(ok(summary_text("fetch", ids=copied)))

    summary = ensure_context_summary(conversation)

    sent = anthropic.requests_for("anthropic.messages")[0].body["messages"][0]["content"]
    assert "Tool result compacted" not in sent

    assert carried_facts(summary) == [
        "The export for the autumn newsletter is at /srv/exports/autumn.tar.gz today."
    ]
    for marker in ("Tool result compacted", "characters", "Key details further", "]"):
        assert marker not in summary
