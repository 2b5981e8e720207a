"""Agent turns and when compaction pays for itself, through the
pre-call hook alone: no worker runs in these tests unless one says so."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.post_exchange.pipeline import process_exchange
from assistant.providers import convert
from assistant.services import add_message, build_context, ensure_context_summary
from assistant.summary.leases import SummaryInTransaction, claim, summary_lease
from bench.payload import CostMeter
from tests.builders import chat_turns, html

pytestmark = pytest.mark.django_db

SMALL_TRIGGER = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 20_000,
    "MAX_RECENT_TOKENS": 8_000,
    "TOOL_RESULT_CHAR_THRESHOLD": 1500,
}


def agent_step(conversation: Conversation, index: int, result: str) -> list[Message]:
    """One model call's output: an assistant message calling a tool, then its result."""
    call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"/src/f{index}.py"}}
    assistant = add_message(conversation, "assistant", f"Reading f{index}.", tool_calls=[call])
    return [assistant, add_message(conversation, "tool", result, tool_call_id=call["id"])]


def request_tokens(context) -> int:
    return context.tokens.total


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_one_request_answered_by_120_tool_calls_stays_bounded_by_the_pre_call_hook(conversation):
    request = add_message(conversation, "user", "Refactor the session module, file by file.")
    results = {}
    largest = 0
    for index in range(120):
        ensure_context_summary(conversation)
        context = build_context(conversation)
        payload = context.to_anthropic()  # validated: pairs intact, starts with a user message
        assert payload["messages"][0]["role"] == "user"
        largest = max(largest, request_tokens(context))
        # The user's request is always sent verbatim, first.
        assert context.messages[0]["content"] == request.content
        step = agent_step(conversation, index, html(3000, marker=f"file {index} "))
        results[step[1].pk] = step[1].content
        # The newest step is sent verbatim.
        newest = build_context(conversation).messages[-2:]
        assert newest[1]["content"] == step[1].content

    newest_step_tokens = 800  # an assistant message and one 3,000-character result
    assert largest <= SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"] + newest_step_tokens
    # The turn was split inside itself and summarized, incrementally.
    assert (
        CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").count()
        >= 2
    )
    # Every original is still stored, byte for byte.
    stored = dict(Message.objects.filter(pk__in=results).values_list("pk", "content"))
    assert stored == results
    assert Message.objects.get(pk=request.pk).content == request.content


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_each_break_of_the_cached_prefix_takes_the_request_well_below_the_trigger(conversation):
    # Under prompt caching a break rewrites the rest of the request at the
    # cache-write price. A break that only gets the request just under the
    # trigger (compacting the consumed results) is followed by another a few
    # calls later: at the trigger the hook compacts and shifts in one step.
    meter = CostMeter()  # the provider's count (the bench's token rule)
    add_message(conversation, "user", "Refactor the session module, file by file.")
    after_break, previous = [], None
    for index in range(120):
        ensure_context_summary(conversation)
        figures = meter.record(build_context(conversation).to_anthropic())
        if previous is not None and figures.cached_tokens < previous:
            after_break.append(figures.tokens)
        previous = figures.tokens
        call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"f{index}.py"}}
        add_message(conversation, "assistant", "", tool_calls=[call], input_tokens=figures.tokens)
        add_message(
            conversation, "tool", html(3000, marker=f"file {index} "), tool_call_id=call["id"]
        )

    trigger = SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"]
    assert len(after_break) >= 3
    assert max(after_break) <= 0.6 * trigger, after_break


def order_rows(index: int) -> str:
    """A tool result of facts: each row says what its ids are."""
    return "\n".join(
        f"Order ORD-{index:03d}-{n:02d} for customer cus_{index * 40 + n:05d} was shipped "
        f"to warehouse WH-{n % 7} with tracking code TRK{index:03d}X{n:02d}."
        for n in range(25)
    )


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 6_000,
        "MAX_RECENT_TOKENS": 2_000,
    }
)
def test_carried_facts_give_way_to_the_turns_request_and_the_newest_steps(conversation):
    # A long request (a pasted spec, sent verbatim all turn long) and results
    # full of facts: the facts a summary carries fill only the room it has
    # under the trigger, so every request stays within the trigger plus its
    # newest step (they filled CARRIED_FACTS_MAX_TOKENS and went over it).
    meter = CostMeter()  # the provider's count (the bench's token rule)
    spec = " ".join(f"Requirement {n}: every order keeps its audit trail." for n in range(300))
    add_message(conversation, "user", "Reconcile the orders against this spec. " + spec)
    over, carried = [], 0
    for index in range(40):
        summary = ensure_context_summary(conversation) or ""
        carried = max(carried, summary.count("\n- "))
        tokens = meter.record(build_context(conversation).to_anthropic()).tokens
        call = {"id": f"toolu_{index}", "name": "orders", "arguments": {"page": index}}
        add_message(conversation, "assistant", "", tool_calls=[call], input_tokens=tokens)
        add_message(conversation, "tool", order_rows(index), tool_call_id=call["id"])
        newest = meter.record(build_context(conversation).to_anthropic()).tokens - tokens
        if tokens > 6_000 + newest:
            over.append((index, tokens, newest))

    assert CompactionEvent.objects.filter(conversation=conversation).exists()
    assert carried > 0  # facts are carried where there is room
    assert over == []


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_a_result_larger_than_the_trigger_leaves_the_request_once_it_is_read(conversation):
    # The hook's first try, while the huge result is the newest step, can only
    # summarize the small steps before it; that summary is refused as not smaller.
    # The refusal must not hold back the next split, which can summarize the result.
    add_message(conversation, "user", "Investigate the build.")
    sizes = []
    for index, result in enumerate(["ok", "ok", html(120_000), "ok", "ok", "ok"]):
        ensure_context_summary(conversation)
        sizes.append(request_tokens(build_context(conversation)))
        agent_step(conversation, index, result)

    trigger = SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"]
    assert sizes[3] > trigger  # the huge result is the newest step: sent as it is
    assert max(sizes[4:]) < trigger  # and out of the request from the next call on
    stored = Message.objects.filter(conversation=conversation, role="tool")
    assert stored.filter(content=html(120_000)).count() == 1  # its original is kept


def lock_file(index: int) -> str:
    """A dependency lock file: hashes and versions, denser in tokens than prose."""
    lines = []
    for n in range(60):
        digest = hashlib.sha256(f"{index}-{n}".encode()).hexdigest()
        lines.append(f'  "pkg_{n}": {{:hex, :pkg_{n}, "1.{n}.{index}", "{digest}", [:mix]}},')
    return "\n".join(lines)


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_after_a_compaction_the_context_is_sized_as_the_provider_counts_it(conversation):
    # The provider counts these results at about 1.5x our characters-per-token
    # estimate. Once the hook compacts, every count it reported is stale: the
    # request is then sized by estimates scaled by the provider's ratio, or it
    # would go out over the trigger believing itself well under it.
    meter = CostMeter()  # the provider's count (the bench's token rule)
    add_message(conversation, "user", "Update every dependency.")
    over = []
    for index in range(40):
        ensure_context_summary(conversation)
        tokens = meter.record(build_context(conversation).to_anthropic()).tokens
        call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"mix{index}.lock"}}
        add_message(conversation, "assistant", "", tool_calls=[call], input_tokens=tokens)
        step = add_message(conversation, "tool", lock_file(index), tool_call_id=call["id"])
        newest = meter.record(build_context(conversation).to_anthropic()).tokens - tokens
        if tokens > SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"] + newest:
            over.append((index, tokens))

    assert step.token_estimate * 1.3 < newest  # the content is as dense as announced
    assert CompactionEvent.objects.filter(conversation=conversation).exists()
    assert over == []


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_a_result_no_assistant_message_has_followed_is_never_touched(conversation):
    add_message(conversation, "user", "Read everything.")
    for index in range(40):
        agent_step(conversation, index, html(3000))
    unread = Message.objects.filter(conversation=conversation, role="tool").latest("id")

    ensure_context_summary(conversation)

    unread.refresh_from_db()
    assert (unread.compaction, unread.compacted_content) == ("", None)
    assert build_context(conversation).messages[-1]["content"] == unread.content


@override_settings(ASSISTANT_COMPACTION={**SMALL_TRIGGER, "KEEP_NEWEST_TOOL_RESULTS": 3})
def test_past_the_trigger_consumed_results_of_the_turn_are_compacted_but_the_newest_three(
    conversation,
):
    add_message(conversation, "user", "Read the files.")
    steps = [agent_step(conversation, index, html(3000)) for index in range(30)]
    add_message(conversation, "assistant", "Thinking about what I read.")

    ensure_context_summary(conversation)

    compaction = {step[1].pk: Message.objects.get(pk=step[1].pk).compaction for step in steps}
    newest = [step[1].pk for step in steps[-3:]]
    assert [compaction[pk] for pk in newest] == ["", "", ""]
    assert all(compaction[step[1].pk] == "truncated" for step in steps[:-3])


def test_a_short_conversation_sends_byte_identical_leading_messages(conversation):
    # Under the token trigger but past the 40-message count trigger.
    previous = previous_system = None
    for turn in range(30):
        add_message(conversation, "user", f"Question {turn}: what does post {turn} say?")
        ensure_context_summary(conversation)
        payload = build_context(conversation).to_anthropic()
        if previous is not None:
            # Everything the previous request sent leads this one unchanged
            # (cache markers aside: they sit on the last message).
            assert strip(payload)["messages"][: len(previous)] == previous
            assert strip(payload)["system"] == previous_system
        previous, previous_system = strip(payload)["messages"], strip(payload)["system"]
        add_message(conversation, "assistant", f"Post {turn} is about topic {turn}. " * 5)

    assert Message.objects.filter(conversation=conversation).count() == 60
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()


def read_four_modules(conversation: Conversation, size: int) -> None:
    """One request answered by four large reads, as a coding agent starts."""
    add_message(conversation, "user", "Review these four modules.")
    calls = [
        {"id": f"toolu_m{i}", "name": "Read", "arguments": {"path": f"/src/m{i}.py"}}
        for i in range(4)
    ]
    add_message(conversation, "assistant", "Reading them.", tool_calls=calls)
    for i, call in enumerate(calls):
        add_message(
            conversation, "tool", html(size, marker=f"module {i} "), tool_call_id=call["id"]
        )


def exchange_of_four_reads(conversation: Conversation, size: int) -> None:
    """The four reads answered, the exchange finished and the worker run on it."""
    read_four_modules(conversation, size)
    add_message(conversation, "assistant", "All four modules use the same session helper.")
    Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
    assert process_exchange(conversation.pk) is True
    conversation.refresh_from_db()


def test_at_the_trigger_the_worker_prebuilds_the_summary_the_hook_then_adopts(conversation):
    # Over the trigger the pre-call hook shifts whatever compacting the reads
    # frees, so the worker builds that summary ahead, and the next request
    # adopts it instead of waiting on the summarizer.
    exchange_of_four_reads(conversation, 52_000)

    pending = conversation.pending_summary
    assert pending
    add_message(conversation, "user", "Which helper is it?")
    assert ensure_context_summary(conversation) == pending
    conversation.refresh_from_db()
    assert conversation.pending_summary is None


def test_below_the_trigger_a_conversation_that_saved_nothing_pays_for_no_summary(conversation):
    # About 36,000 tokens of reads under the 50,000 trigger, in one provider
    # message with the newest results: summarizing them would shrink the
    # request, but the summarizer reading them all costs more than the cache
    # reads the next calls can save. The cached prefix stays as it is.
    read_four_modules(conversation, 36_000)
    previous = None
    for index in range(3):
        ensure_context_summary(conversation)
        messages = strip(build_context(conversation).to_anthropic())["messages"]
        if previous is not None:
            assert messages[: len(previous)] == previous
        previous = messages
        agent_step(conversation, index, f"line {index}: ok")

    assert not CompactionEvent.objects.filter(conversation=conversation).exists()


def test_the_worker_builds_no_summary_that_compacting_results_makes_needless(conversation):
    # Past the soft watermark (0.8 of the trigger) only because of consumed
    # reads the pre-call hook compacts first: no shift is in sight.
    exchange_of_four_reads(conversation, 45_000)

    assert conversation.pending_summary is None
    # What it did prepare: the reads' compactions, for the hook to apply.
    prepared = Message.objects.filter(conversation=conversation, prepared_content__isnull=False)
    assert prepared.count() == 4


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 6_000,
        "MAX_RECENT_TOKENS": 3_000,
    }
)
def test_a_conversation_nearing_the_trigger_still_compacts_before_it_overflows(conversation):
    largest = 0
    for turn in range(40):
        add_message(conversation, "user", f"Tell me about post {turn}. " + "x" * 600)
        ensure_context_summary(conversation)
        largest = max(largest, build_context(conversation).tokens.total)
        add_message(conversation, "assistant", f"Post {turn}: " + "y" * 600)

    assert largest <= 6_000
    assert CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").exists()


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "MAX_MESSAGES_BEFORE_SUMMARY": 10,
        "MIN_RECENT_MESSAGES": 4,
    }
)
def test_the_count_trigger_waits_for_the_cache_to_go_cold(conversation):
    chat_turns(conversation, 8, size=400)

    assert ensure_context_summary(conversation) is None  # the cache is warm: nothing changes

    Message.objects.filter(conversation=conversation).update(
        created_at=timezone.now() - timedelta(seconds=301)
    )
    summary = ensure_context_summary(conversation)

    assert summary is not None
    assert (
        CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").count()
        == 1
    )


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "MAX_MESSAGES_BEFORE_SUMMARY": 10,
        "MIN_RECENT_MESSAGES": 4,
        "COMPACTION_TIMING": "eager",
    }
)
def test_eager_timing_applies_the_count_trigger_at_once(conversation):
    chat_turns(conversation, 8, size=400)

    assert ensure_context_summary(conversation) is not None


def test_system_messages_stay_in_the_system_part_wherever_they_stand(conversation):
    add_message(conversation, "system", "Answer in French.")
    add_message(conversation, "user", "Hello")
    add_message(conversation, "assistant", "Bonjour")
    add_message(conversation, "system", "From now on, be brief.")
    add_message(conversation, "user", "And now?")

    context = build_context(conversation)

    assert context.system == "You help.\n\nAnswer in French.\n\nFrom now on, be brief."
    assert [m["role"] for m in context.messages] == ["user", "assistant", "user"]


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "MAX_MESSAGES_BEFORE_SUMMARY": 6,
        "MIN_RECENT_MESSAGES": 2,
        "COMPACTION_TIMING": "eager",
    }
)
def test_system_messages_are_never_summarized_away(conversation):
    add_message(conversation, "system", "Never reveal the coupon codes.")
    chat_turns(conversation, 6, size=400)

    assert ensure_context_summary(conversation) is not None

    context = build_context(conversation)
    assert context.cutoff_id is not None
    assert "Never reveal the coupon codes." in context.system


def test_a_reused_tool_call_id_in_an_agent_turn_goes_out_unique(conversation):
    add_message(conversation, "user", "Check the flight twice.")
    for _ in range(2):
        call = {"id": "call_1", "name": "get_flight", "arguments": {"id": "HAT001"}}
        add_message(conversation, "assistant", "", tool_calls=[call])
        add_message(conversation, "tool", '{"status": "available"}', tool_call_id="call_1")

    payload = build_context(conversation).to_anthropic()

    uses = [b["id"] for m in payload["messages"] for b in m["content"] if b["type"] == "tool_use"]
    answers = [
        b["tool_use_id"]
        for m in payload["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert len(set(uses)) == 2
    assert answers == uses
    convert.check_anthropic_messages(payload["messages"])


# --- the summary lease -------------------------------------------------------------


def test_the_lease_is_refused_inside_the_callers_transaction(conversation):
    refused = pytest.raises(SummaryInTransaction, match="non_atomic_requests")
    with transaction.atomic(), refused, summary_lease(conversation.pk):
        pass


@pytest.mark.django_db(transaction=True)
def test_a_lease_whose_holder_session_is_gone_is_taken_over_at_once():
    import psycopg
    from django.db import connection

    conversation = Conversation.objects.create(title="held")
    dsn = connection.settings_dict
    # Another process's session takes the lease, then dies (its backend exits).
    other = psycopg.connect(
        host=dsn["HOST"] or "127.0.0.1",
        port=dsn["PORT"] or 5432,
        user=dsn["USER"],
        dbname=dsn["NAME"],
        autocommit=True,
    )
    pid = other.info.backend_pid
    other.execute(
        "UPDATE assistant_conversation SET summary_lease_token = gen_random_uuid(), "
        "summary_lease_expires_at = now() + interval '120 seconds', "
        "summary_lease_holder_pid = %s WHERE id = %s",
        [pid, conversation.pk],
    )
    assert claim(conversation.pk) is None  # a live holder: refused
    other.close()
    for _ in range(50):  # the backend exits as soon as its socket closes
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone()[0] == 0:
                break

    lease = claim(conversation.pk)

    assert lease is not None
    assert lease.release() is True


def strip(payload):
    """The payload without cache_control markers (they move with the last message)."""
    return json.loads(
        json.dumps(payload),
        object_hook=lambda block: {k: v for k, v in block.items() if k != "cache_control"},
    )


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_the_turns_user_message_is_summarized_once_the_split_leaves_its_turn(
    conversation, monkeypatch
):
    from assistant import providers as llm

    transcripts = []
    real = llm.summarize

    def recording(transcript, **kwargs):
        transcripts.append(transcript)
        return real(transcript, **kwargs)

    monkeypatch.setattr(llm, "summarize", recording)
    first = add_message(conversation, "user", "Audit the billing module, file by file.")
    for index in range(90):
        ensure_context_summary(conversation)
        agent_step(conversation, index, html(3000))
    add_message(conversation, "assistant", "The billing module is audited.")
    ensure_context_summary(conversation)
    assert conversation_anchor(conversation) == first.pk  # split inside the first turn
    assert not any(first.content in t for t in transcripts)  # kept verbatim, not summarized

    add_message(conversation, "user", "Now the invoices module.")
    for index in range(90, 180):
        ensure_context_summary(conversation)
        agent_step(conversation, index, html(3000))

    assert conversation_anchor(conversation) != first.pk
    assert any(first.content in t for t in transcripts)


def conversation_anchor(conversation: Conversation) -> int | None:
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    return metadata.get("compaction_anchor_message_id")


def six_reads_answered_by(conversation: Conversation, model: str) -> None:
    """A turn of six 20 KB reads (about 30,000 tokens, under the 50,000
    trigger), each model call recorded with the model that made it."""
    add_message(conversation, "user", "Review the six modules.")
    for index in range(6):
        call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"/src/m{index}.py"}}
        add_message(conversation, "assistant", "", tool_calls=[call], metadata={"model": model})
        add_message(
            conversation, "tool", html(20_000, marker=f"module {index} "), tool_call_id=call["id"]
        )
    add_message(conversation, "assistant", "Reading on.", metadata={"model": model})


# The arithmetic below is a forced shift keeping the recent window: 20,000 tokens
# written again, which a batch defers (with the newest step alone kept, a forced
# shift costs less, and so does waiting for it).
@override_settings(ASSISTANT_COMPACTION={"VERBATIM_AFTER_SHIFT": "recent"})
@pytest.mark.parametrize(
    ("model", "compacted"), [("claude-haiku-4-5", False), ("gemini-2.5-flash", True)]
)
def test_a_voluntary_batch_is_priced_at_the_chat_models_cache_prices(
    conversation, model, compacted
):
    # The conversation has saved 15,500 tokens' worth. Compacting the three
    # oldest reads frees about 13,650 tokens and rewrites the 16,450 left after
    # the first of them: about 17,500 at Anthropic's 1.25x (more than the
    # savings), about 13,400 at Gemini's 1.0x, its implicit caching having no
    # write premium (covered).
    six_reads_answered_by(conversation, model)
    newest = conversation.messages.last().pk
    ledger = {"balance": 15_500.0, "gap": 0, "since": newest}
    write_state(
        Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.CACHE_LEDGER: ledger}
    )

    ensure_context_summary(conversation)

    events = CompactionEvent.objects.filter(conversation=conversation, kind="tool_results")
    assert events.exists() is compacted


def chapters_then_two_reads(conversation: Conversation, *, balance: float, calls: int) -> None:
    """Four long turns (about 20,000 tokens), then a turn of two small reads;
    the ledger says the conversation has made `calls` model calls and saved
    `balance` tokens' worth."""
    for turn in range(4):
        add_message(conversation, "user", f"Tell me about chapter {turn}. " + "x" * 16_000)
        add_message(conversation, "assistant", f"Chapter {turn}: " + "y" * 2_000)
    add_message(conversation, "user", "Check the two config files.")
    for index in range(2):
        agent_step(conversation, index, html(2_400, marker=f"config {index} "))
    add_message(conversation, "assistant", "Both configs agree.")
    newest = conversation.messages.last().pk
    ledger = {"balance": balance, "gap": 0, "since": newest, "calls": calls}
    write_state(
        Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.CACHE_LEDGER: ledger}
    )


@pytest.mark.parametrize(("calls", "shifted"), [(7, False), (200, True)])
def test_savings_made_earlier_never_license_an_early_shift_that_does_not_pay_on_its_own(
    conversation, calls, shifted
):
    # The same window and the same savings; what the shift is expected to
    # save differs. Seven calls in, the conversation is not expected to run
    # the ten or so calls to the trigger: the shift would rewrite the context
    # for reads it may never save. Two hundred calls in, it is.
    chapters_then_two_reads(conversation, balance=100_000.0, calls=calls)

    ensure_context_summary(conversation)

    summaries = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert summaries.exists() is shifted


# A shift that keeps the recent window (with the newest step alone, the reads are
# summarized with the rest).
@override_settings(
    ASSISTANT_COMPACTION={"KEEP_NEWEST_TOOL_RESULTS": 0, "VERBATIM_AFTER_SHIFT": "recent"}
)
def test_an_early_shift_compacts_the_consumed_results_it_keeps_in_the_same_step(conversation):
    # Four long turns, then a turn of two small reads: compacting those two
    # alone frees too little to break the cached prefix for, but the early
    # shift that pays (a long conversation whose savings cover it) rewrites
    # everything after the system part anyway. They go with it, not a few
    # calls later in a break of their own.
    chapters_then_two_reads(conversation, balance=100_000.0, calls=200)

    ensure_context_summary(conversation)

    kinds = list(
        CompactionEvent.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("kind", flat=True)
    )
    # One shift and the two reads' compactions in the same step (the window
    # summary's event is written last: its figures are of the whole rewrite).
    assert sorted(kinds) == ["tool_results", "tool_results", "window_summary"]
    reads = conversation.messages.filter(role="tool")
    assert all(read.compacted_content for read in reads)
