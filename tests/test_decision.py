"""decide(state, config, now): the plan the pre-call hook executes, pure."""

import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from assistant.history.state_writes import write_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.services import (
    add_message,
    build_context,
    ensure_context_summary,
    process_exchange,
)
from assistant.settings.conf import compaction_config
from assistant.summary.prebuild import prebuild_window_summary
from assistant.summary.shift import shift_window
from assistant.window import (
    AT_TRIGGER,
    BATCH_IN_SHIFT,
    COLD_CACHE,
    COUNT_TRIGGER,
    SHIFT_WITHIN_LATENCY,
    Shift,
    adopted_split,
    decide,
    load_window,
    results_step,
    split_for,
    worker_split,
)
from assistant.window.decision import MoveWindow
from assistant.window.ledger import Outlook
from tests.builders import chat_turns, html, tool_turn

pytestmark = pytest.mark.django_db


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 400,
    }
)
def test_past_the_trigger_the_plan_is_a_forced_shift_decided_without_a_query(
    conversation, django_assert_num_queries
):
    chat_turns(conversation, 6, size=400)  # 12 messages of ~101 tokens: past 1,000
    state, config = load_window(conversation.pk), compaction_config()

    with django_assert_num_queries(0):
        plan = decide(state, config, timezone.now())

    assert plan.tokens == state.context_tokens()
    assert (plan.shift.kind, plan.shift.share, plan.at_trigger) == ("forced", 1.0, True)
    assert plan.shift.start == 10  # the newest turn stays verbatim: two pass 400 tokens
    assert AT_TRIGGER in plan.reasons


@override_settings(ASSISTANT_COMPACTION={"MAX_MESSAGES_BEFORE_SUMMARY": 10})
def test_the_count_trigger_waits_for_a_cold_cache_and_now_is_the_callers(conversation):
    chat_turns(conversation, 5)  # 10 messages, far below the token trigger
    state, config = load_window(conversation.pk), compaction_config()
    last = state.last_request_at()

    warm = decide(state, config, last + timedelta(seconds=config.CACHE_TTL_SECONDS))
    cold = decide(state, config, last + timedelta(seconds=config.CACHE_TTL_SECONDS + 1))

    assert (warm.cold, warm.shift) == (False, None)
    assert (cold.cold, cold.shift.kind, cold.shift.count) == (True, "forced", True)
    assert {COLD_CACHE, COUNT_TRIGGER} <= set(cold.reasons)


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 400,
    }
)
def test_under_the_lease_a_plans_shift_is_dropped_once_another_caller_made_it(conversation):
    chat_turns(conversation, 6, size=400)
    config = compaction_config()
    stale = decide(load_window(conversation.pk), config, timezone.now()).shift
    summary = ensure_context_summary(conversation)  # another caller shifts first

    again = shift_window(conversation.pk, config, stale)

    assert not stale.still_due(load_window(conversation.pk), config)
    assert again == summary
    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 400,
    }
)
def test_the_worker_builds_below_the_soft_watermark_only_when_the_hook_asks(conversation):
    rows = chat_turns(conversation, 3, size=400)  # ~606 tokens: under 80% of the trigger
    state, config = load_window(conversation.pk), compaction_config()

    assert worker_split(state, config, requested=False) is None
    assert not prebuild_window_summary(conversation)
    assert worker_split(state, config, requested=True) == 4  # an early shift's budget
    assert prebuild_window_summary(conversation, requested=True)
    metadata = load_window(conversation.pk).columns
    assert metadata[MetadataKeys.PENDING_THROUGH_MESSAGE_ID] == rows[3].pk


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 400,
    }
)
def test_the_worker_is_asked_one_latency_before_the_shift_the_window_is_growing_into(
    conversation,
):
    rows = chat_turns(conversation, 3, size=400)  # ~606 tokens: under 80% of the trigger
    start = timezone.now() - timedelta(seconds=50)
    for i, row in enumerate(rows):  # one message every 10 s: ~10 tokens a second
        type(row).objects.filter(pk=row.pk).update(created_at=start + timedelta(seconds=10 * i))
    config = compaction_config()

    def plan_when_the_worker_took(seconds: float):
        request = {"base": None, "answered": True, "took": seconds}
        values = {MetadataKeys.WORKER_SEEN_AT: 1.0, MetadataKeys.PREBUILD_REQUEST: request}
        write_state(Conversation.objects.filter(pk=conversation.pk), values)
        state = load_window(conversation.pk)
        return state, decide(state, config, timezone.now())

    state, quick = plan_when_the_worker_took(5)  # the window gains ~50 tokens meanwhile
    assert state.growth_within(5) < 100
    assert (quick.shift, quick.ask_worker) == (None, False)
    state, slow_worker = plan_when_the_worker_took(40)  # ~400: past the trigger by then
    assert state.context_tokens() + state.growth_within(40) >= 1000
    assert (slow_worker.shift, slow_worker.ask_worker) == (None, True)
    assert SHIFT_WITHIN_LATENCY in slow_worker.reasons


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 5000,
        "MAX_RECENT_TOKENS": 2000,
    }
)
def test_an_adopted_early_shift_keeps_what_it_would_have_kept_when_it_was_asked_for(
    conversation,
):
    rows = chat_turns(conversation, 10, size=400)  # 20 messages of ~101 tokens
    start = timezone.now() - timedelta(seconds=200)
    for i, row in enumerate(rows):  # one message every 10 s: ~10 tokens a second
        type(row).objects.filter(pk=row.pk).update(created_at=start + timedelta(seconds=10 * i))
    config = compaction_config()

    def adopted(took: float, kind: str = "early") -> tuple[int | None, int | None]:
        request = {"base": None, "answered": True, "took": took}
        write_state(
            Conversation.objects.filter(pk=conversation.pk),
            {MetadataKeys.PREBUILD_REQUEST: request},
        )
        state = load_window(conversation.pk)
        budget, split = split_for(state, config, early=kind == "early")
        return split, adopted_split(state, config, Shift(kind, 0.3, False, budget, split))

    planned, same = adopted(0)  # no latency: the shift planned now
    assert planned is not None and same == planned
    # Asked 100 s ago, when the window was ~1,000 tokens smaller: it keeps ~400, not ~800.
    planned, then = adopted(100)
    assert then is not None and then > planned
    assert sum(row.token_estimate for row in rows[then:]) <= 0.4 * 1000 + 101
    planned, forced = adopted(100, kind="forced")  # a shift at the trigger: as planned
    assert forced == planned


def test_what_a_step_is_expected_to_save_grows_with_how_long_the_conversation_has_run():
    # 20,000 tokens, 1,000 more a call: the trigger is 30 calls away.
    young = Outlook(
        tokens=20_000, per_call=1_000, trigger=50_000, shift_cost=57_500, kept=22_000, calls=5
    )
    old = replace(young, calls=300)

    # Five calls in, the trigger is unlikely to be reached: freeing 10,000
    # tokens saves about five calls' reads of them, and little of the shift.
    assert young.saves(10_000) < 0.1 * 10_000 * 5 + 0.01 * 57_500
    # Three hundred calls in, nearly all 30 calls' reads, and the forced
    # shift (57,500) coming 10,000 of its 28,000 tokens of growth later.
    assert old.saves(10_000) > 0.9 * (0.1 * 10_000 * 30 + 57_500 * 10_000 / 28_000)
    assert young.saves(0) == old.saves(0) == 0


def test_the_summarizer_input_a_long_conversation_pays_anyway_is_not_an_early_shifts_own():
    # Every message is summarized once, whenever the shift comes: an early shift adds
    # only what the conversation would not pay at the forced one, which it reaches
    # (`reached`) the surer the longer it has run and the nearer the trigger is.
    near = Outlook(
        tokens=45_000, per_call=1_000, trigger=50_000, shift_cost=57_500, kept=22_000, calls=200
    )
    far_and_young = replace(near, tokens=10_000, calls=5)

    assert near.reached > 0.97
    assert far_and_young.reached < 0.001
    assert replace(near, calls=0).reached == 0


def test_a_shift_at_the_trigger_checked_after_a_results_batch_stays_due_under_the_lease(
    conversation,
):
    # After a results batch got the request below the trigger, the call's forced
    # shift is checked on the window the batch left (MoveWindow.on): due while
    # the context is still at what this call saw (`share` of the trigger). Not
    # through a round trip of floats: (x / t) * t is above x for some sizes.
    chat_turns(conversation, 6, size=400)
    tokens = load_window(conversation.pk).context_tokens()
    trigger = next(t for t in range(tokens + 1, 100 * tokens) if tokens / t * t > tokens)
    keys = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": trigger,
        "MAX_RECENT_TOKENS": 200,
    }
    with override_settings(ASSISTANT_COMPACTION=keys):
        config = compaction_config()
        state = load_window(conversation.pk)
        at_trigger = MoveWindow(None, False, False, False, False, True, False)
        shift = at_trigger.on(state, config, adopted=False).shift

        assert (shift.kind, shift.share < 1.0) == ("forced", True)
        assert shift.still_due(state, config)
        shift_window(conversation.pk, config, shift)

    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1
    assert load_window(conversation.pk).through_id is not None


def three_reads_then_a_question(conversation: Conversation) -> None:
    """A short chat, a turn of three 20 KB reads (about 15,000 tokens, past
    COMPACT_WATERMARK of the 50,000 trigger) answered, then the next question;
    the ledger says the conversation has made 200 model calls and saved enough
    for any step."""
    chat_turns(conversation, 2, size=400)
    billing_reads(conversation, 3)
    question_after_200_calls(conversation, gap=0)


def billing_reads(conversation: Conversation, count: int) -> None:
    """A turn reading `count` 20 KB billing modules, answered."""
    word = {2: "two", 3: "three"}[count]
    tool_turn(
        conversation,
        f"Read the {word} billing modules.",
        [
            ("Read", {"path": f"/src/billing/m{n}.py"}, html(20_000, f"module {n} "))
            for n in range(count)
        ],
        answer=f"The {word} modules agree.",
    )


def question_after_200_calls(conversation: Conversation, **ledger: int) -> None:
    """The next question; the ledger says the conversation has made 200 model calls and
    saved enough for any step (`ledger`: its other figures)."""
    add_message(conversation, "user", "Now compare them with the invoices module.")
    newest = conversation.messages.last().pk
    value = {"balance": 100_000.0, "since": newest, "calls": 200, **ledger}
    write_state(Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.CACHE_LEDGER: value})


@override_settings(ASSISTANT_COMPACTION={"KEEP_NEWEST_TOOL_RESULTS": 0})
def test_a_voluntary_results_batch_goes_with_the_early_shift_made_in_the_same_call(
    conversation,
):
    # Compacting the three consumed reads pays, and so does the early shift
    # that summarizes them with everything before the new question. Taken
    # first, the batch rewrote the tail and left the shift judged on a window
    # it had freed: the shift waited a few calls and wrote the prefix again.
    # The shift rewrites everything after the system part anyway: the batch
    # goes with it, one rewrite.
    three_reads_then_a_question(conversation)
    state = load_window(conversation.pk)
    plan = decide(state, compaction_config(), timezone.now())

    assert (plan.shift.kind, plan.results) == ("early", None)
    assert BATCH_IN_SHIFT in plan.reasons

    ensure_context_summary(conversation)

    kinds = CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    assert list(kinds) == ["window_summary"]
    context = build_context(conversation)
    assert context.messages[0]["content"] == "Now compare them with the invoices module."
    assert all(
        read.content.startswith("<article>module") for read in Message.objects.filter(role="tool")
    )


@override_settings(ASSISTANT_COMPACTION={"KEEP_NEWEST_TOOL_RESULTS": 0})
def test_a_results_batch_is_not_left_to_an_early_shift_waiting_after_a_failed_summary(
    conversation,
):
    # The summary of this split failed a moment ago: the early shift waits out
    # its back-off, so the batch that pays goes on its own.
    three_reads_then_a_question(conversation)
    failure = {"base": None, "through": None, "attempts": 1, "retry_at": time.time() + 600}
    write_state(
        Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.SUMMARY_FAILURE: failure}
    )

    ensure_context_summary(conversation)

    kinds = CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    assert set(kinds) == {"tool_results"}
    assert all(read.compacted_content for read in Message.objects.filter(role="tool"))


def two_reads_then_more_talk(conversation: Conversation, *, rewrites: int) -> None:
    """A turn of two 20 KB reads, four long turns after it, then a question;
    the ledger says the conversation has made 200 model calls, saved enough for
    any step, and had its prefix rewritten `rewrites` times."""
    billing_reads(conversation, 2)
    chat_turns(conversation, 4, size=4_000)
    question_after_200_calls(conversation, rewrites=rewrites)


@override_settings(ASSISTANT_COMPACTION={"KEEP_NEWEST_TOOL_RESULTS": 0})
@pytest.mark.parametrize(("rewrites", "pays"), [(0, True), (100, False)])
def test_a_results_batch_pays_only_before_the_next_rewrite_would_compact_them_anyway(
    conversation, rewrites, pays
):
    # Compacting the two reads rewrites the four long turns after them. The
    # next shift compacts or summarizes the reads anyway, so the batch saves
    # their reads only until then. With no rewrite yet nothing says when that
    # comes, and the batch pays as the trigger nears; in a conversation whose
    # prefix has lasted two calls on average (100 rewrites in 200 calls) it
    # saves about two calls' reads, far less than the rewrite.
    two_reads_then_more_talk(conversation, rewrites=rewrites)
    state = load_window(conversation.pk)

    results = results_step(state, compaction_config(), free=False)

    assert results.plan.most_freed >= 3000
    assert results.pays is pays


@override_settings(
    ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 20_000, "KEEP_NEWEST_TOOL_RESULTS": 2}
)
def test_a_cold_cache_compacts_what_the_exchanges_left_and_the_turns_but_its_newest(
    conversation,
):
    for post in range(3):
        call = ("get_blog_post", {"id": post}, html(6000, f"post {post}"))
        tool_turn(conversation, f"Read post {post}.", [call])
    process_exchange(conversation.pk)  # the worker prepares their compact versions
    calls = [("get_blog_post", {"id": post}, html(6000, f"post {post}")) for post in (7, 8, 9)]
    tool_turn(conversation, "Now compare posts 7, 8 and 9.", calls)  # the current turn
    state, config = load_window(conversation.pk), compaction_config()
    cold = state.last_request_at() + timedelta(seconds=config.CACHE_TTL_SECONDS + 1)

    plan = decide(state, config, cold)

    # All that the finished exchanges left goes at once; of the turn's results, the
    # oldest: the newest two are still the ones the model reads next.
    assert plan.cold and plan.results.free
    results = [row.pk for row in state.rows if row.role == Message.Role.TOOL]
    planned = [row.pk for row in [*plan.results.plan.compact, *plan.results.plan.stub]]
    assert sorted(planned) == results[:-2]
