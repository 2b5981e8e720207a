"""OpenTelemetry: the spans and metrics the app emits, read with the SDK's
in-memory span exporter and metric reader (the app itself depends on the
API only). The SDK is installed once per test process, as a host would;
each test reads only what it produced (delta temporality)."""

from __future__ import annotations

from collections import Counter as Tally
from collections import defaultdict
from datetime import timedelta

import anthropic
import openai
import pytest
from django.db import connection
from django.utils import timezone
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assistant.history import queue
from assistant.models import CompactionEvent, Conversation, Message
from assistant.ops import telemetry
from assistant.services import (
    add_message,
    build_context,
    chat_step,
    ensure_context_summary,
    finish_exchange,
    queue_staff_action,
    regenerate_window_summary,
)
from assistant.settings.app import app_setting
from assistant.settings.conf import compaction_config
from assistant.summary import leases
from tests.conftest import wait_until
from tests.fake_llm import overloaded
from tests.scenarios import staff_user

CHAT_MODEL = "claude-sonnet-4-6"
SUMMARY_MODEL = "claude-haiku-4-5"


@pytest.fixture(scope="session")
def sdk() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    delta = AggregationTemporality.DELTA
    reader = InMemoryMetricReader(preferred_temporality={Counter: delta, Histogram: delta})
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


class Readings:
    """What the app emitted since the fixture started: spans, and metric
    points by name as (attributes, value) with value a counter's sum or a
    histogram's (sum, count)."""

    def __init__(self, exporter: InMemorySpanExporter, reader: InMemoryMetricReader) -> None:
        self.exporter, self.reader = exporter, reader

    def spans(self, name: str) -> list:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def collect(self) -> dict[str, list[tuple[dict, object]]]:
        found: dict[str, list[tuple[dict, object]]] = defaultdict(list)
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = (point.sum, point.count) if hasattr(point, "count") else point.value
                        found[metric.name].append((dict(point.attributes), value))
        return found


@pytest.fixture
def otel(sdk) -> Readings:
    exporter, reader = sdk
    exporter.clear()
    reader.get_metrics_data()  # drop what earlier tests recorded
    return Readings(exporter, reader)


def chat_call(fake_llm, conversation: Conversation) -> None:
    """One model call through the real anthropic SDK, recorded as the docs' chat loop does."""
    body = build_context(conversation).to_anthropic()
    client = anthropic.Anthropic(api_key="test-key-anthropic", base_url=fake_llm.url)
    response = client.messages.create(model=CHAT_MODEL, max_tokens=256, **body)
    usage = response.usage
    add_message(
        conversation,
        "assistant",
        response.content[0].text,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_tokens=usage.cache_creation_input_tokens,
    )


def sum_by(points, **wanted) -> tuple[float, int]:
    """Sum and count of the histogram points whose attributes hold `wanted`."""
    total, count = 0, 0
    for attributes, (value, n) in points:
        if all(attributes.get(key) == want for key, want in wanted.items()):
            total, count = total + value, count + n
    return total, count


def test_a_chat_loop_through_a_real_worker_emits_every_span_and_metric(
    celery_worker, fake_llm, settings, otel
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1500,
        "MAX_RECENT_TOKENS": 400,
        "MIN_RECENT_MESSAGES": 2,
        "COMPACTION_TIMING": "eager",
    }
    staff = staff_user("otel-staff")
    conversation = Conversation.objects.create(title="otel", system_prompt="You help.")
    turns = 6
    for turn in range(turns):
        add_message(conversation, "user", f"Question {turn}: " + "tell me about the post. " * 40)
        ensure_context_summary(conversation)
        chat_call(fake_llm, conversation)
        finish_exchange(conversation)

        def processed() -> bool:
            conversation.refresh_from_db()
            return conversation.post_exchange_done_at == conversation.last_exchange_at

        assert wait_until(processed)
    queue_staff_action("compact_tool_results", conversation.pk, acting_user=staff)
    assert wait_until(lambda: len(otel.spans(telemetry.STAFF_ACTION_SPAN)) == 1)
    readings = otel.collect()

    # Spans: one per hook run, per post-exchange task, per staff action, per summarizer call.
    assert len(otel.spans(telemetry.PRE_CALL_SPAN)) == turns
    posts = otel.spans(telemetry.POST_EXCHANGE_SPAN)
    assert [span.attributes["assistant.conversation.id"] for span in posts] == [
        conversation.pk
    ] * turns
    staff_span = otel.spans(telemetry.STAFF_ACTION_SPAN)[0]
    assert staff_span.attributes[telemetry.ACTION] == "compact_tool_results"
    summary_requests = [
        r for r in fake_llm.requests_for("anthropic.messages") if r.body["model"] == SUMMARY_MODEL
    ]
    summarizer_spans = otel.spans(f"chat {SUMMARY_MODEL}")
    assert len(summary_requests) >= 1
    assert len(summarizer_spans) == len(summary_requests)
    for span in summarizer_spans:
        assert span.kind == trace.SpanKind.CLIENT
        assert span.attributes[telemetry.OPERATION] == "chat"
        assert span.attributes[telemetry.PROVIDER] == "anthropic"
        assert span.attributes[telemetry.REQUEST_MODEL] == SUMMARY_MODEL
        assert span.attributes[telemetry.OUTPUT_TOKENS] == 50  # the fake's output count

    # gen_ai.client.token.usage: the chat calls, equal to the recorded usage.
    usage = readings[telemetry.TOKEN_USAGE]
    calls = list(Message.objects.filter(conversation=conversation, role="assistant"))
    chat = {"assistant.caller": "chat", telemetry.REQUEST_MODEL: CHAT_MODEL}
    assert sum_by(usage, **chat, **{telemetry.TOKEN_TYPE: "input"}) == (
        sum(m.prompt_tokens for m in calls),
        turns,
    )
    assert sum_by(usage, **chat, **{telemetry.TOKEN_TYPE: "output"}) == (
        sum(m.output_tokens for m in calls),
        turns,
    )
    assert sum_by(usage, **chat, **{telemetry.TOKEN_TYPE: "cache_read"}) == (0, turns)
    # ... and the summarizer's, equal to what its spans carry.
    summarizer = {"assistant.caller": "summarizer", telemetry.PROVIDER: "anthropic"}
    assert sum_by(usage, **summarizer, **{telemetry.TOKEN_TYPE: "input"}) == (
        sum(span.attributes[telemetry.INPUT_TOKENS] for span in summarizer_spans),
        len(summarizer_spans),
    )
    assert sum_by(usage, **summarizer, **{telemetry.TOKEN_TYPE: "output"}) == (
        50 * len(summarizer_spans),
        len(summarizer_spans),
    )
    durations = readings[telemetry.OPERATION_DURATION]
    assert sum_by(durations, **summarizer)[1] == len(summarizer_spans)

    # The product's own: compactions and tokens shed by kind, as the audit log has them.
    events = list(CompactionEvent.objects.filter(conversation=conversation))
    assert events
    kinds = Tally(event.kind for event in events)
    counted = Tally()
    for attributes, value in readings[telemetry.COMPACTIONS]:
        counted[attributes[telemetry.KIND]] += value
    assert counted == kinds
    shed = Tally()
    for attributes, value in readings[telemetry.TOKENS_SHED]:
        shed[attributes[telemetry.KIND]] += value
    expected_shed = Tally()
    for event in events:
        expected_shed[event.kind] += max(event.tokens_before - event.tokens_after, 0)
    assert shed == expected_shed
    on_chat_path = sum(
        1 for e in events if e.kind == "window_summary" and not e.details.get("prebuilt")
    )
    chat_path = sum(value for _, value in readings.get(telemetry.CHAT_PATH_SUMMARIES, []))
    assert chat_path == on_chat_path
    # The worker had the one window summary ready: none was made while the chat waited.
    assert kinds == {"window_summary": 1}
    assert events[0].details["prebuilt"] is True
    assert chat_path == 0
    assert sum_by(readings[telemetry.HOOK_DURATION])[1] == turns
    assert telemetry.SUMMARIZER_FAILURES not in readings
    assert telemetry.LEASE_WAITS not in readings


@pytest.mark.django_db(transaction=True)
def test_a_failing_summarizer_is_counted_with_its_fallback(fake_llm, settings, otel, conversation):
    fake_llm.use_anthropic(settings)
    settings.LLM_MAX_RETRIES = 0
    fake_llm.script_summaries(overloaded())
    for n in range(3):
        add_message(conversation, "user", f"Question {n}: " + "about the post. " * 200)
        add_message(conversation, "assistant", f"Answer {n}: " + "the post is fine. " * 200)
    assert regenerate_window_summary(conversation, keep_last=2) is True
    readings = otel.collect()

    failed = otel.spans(f"chat {SUMMARY_MODEL}")
    assert len(failed) == 1
    assert failed[0].attributes[telemetry.ERROR_TYPE] == "ProviderError"
    assert readings[telemetry.SUMMARIZER_FAILURES] == [
        (
            {
                telemetry.OPERATION: "chat",
                telemetry.PROVIDER: "anthropic",
                telemetry.REQUEST_MODEL: SUMMARY_MODEL,
                "assistant.caller": "summarizer",
                telemetry.ERROR_TYPE: "ProviderError",
            },
            1,
        )
    ]
    assert readings[telemetry.SUMMARIZER_FALLBACKS] == [
        (
            {
                telemetry.PROVIDER: "anthropic",
                telemetry.REQUEST_MODEL: SUMMARY_MODEL,
                "assistant.caller": "summarizer",
            },
            1,
        )
    ]
    assert len(otel.spans("chat offline-summarizer")) == 1


def _hold_lease(conversation, *, progress_seconds_ago: float) -> None:
    """A live holder (this test's own database session) whose last progress
    was `progress_seconds_ago`: a holder renews its lease as its work advances."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    lease = timedelta(seconds=compaction_config().SUMMARY_LEASE_SECONDS - progress_seconds_ago)
    Conversation.objects.filter(pk=conversation.pk).update(
        summary_lease_token="00000000-0000-0000-0000-000000000001",
        summary_lease_expires_at=timezone.now() + lease,
        summary_lease_holder_pid=pid,
    )


@pytest.mark.django_db(transaction=True)
def test_waiting_on_another_process_summary_is_counted(otel, conversation, settings):
    # A holder silent for a second would be a stalled one: a minute of stall limit keeps
    # it live however slowly a loaded machine gets from the stamp to the wait.
    settings.ASSISTANT_COMPACTION = {"SUMMARY_STALL_SECONDS": 60}
    _hold_lease(conversation, progress_seconds_ago=0)

    assert leases.wait_for_release(conversation.pk, timeout=0.1) is False

    assert otel.collect()[telemetry.LEASE_WAITS] == [({telemetry.OUTCOME: "timed_out"}, 1)]


@pytest.mark.django_db(transaction=True)
def test_giving_up_on_a_stalled_holder_is_counted(otel, conversation):
    _hold_lease(conversation, progress_seconds_ago=60)

    assert leases.wait_for_release(conversation.pk, timeout=60) is False  # at once

    assert otel.collect()[telemetry.LEASE_WAITS] == [({telemetry.OUTCOME: "stalled"}, 1)]


@pytest.mark.django_db(transaction=True)
def test_a_summary_the_hook_makes_itself_counts_as_made_on_the_chat_path(
    fake_llm, settings, otel, conversation
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1500,
        "MAX_RECENT_TOKENS": 400,
        "MIN_RECENT_MESSAGES": 2,
    }
    for n in range(4):
        add_message(conversation, "user", f"Question {n}: " + "about the post. " * 60)
        add_message(conversation, "assistant", f"Answer {n}: " + "the post is fine. " * 30)
    add_message(conversation, "user", "And now?")

    ensure_context_summary(conversation)  # no worker ran: the hook summarizes itself

    event = CompactionEvent.objects.get(conversation=conversation)
    readings = otel.collect()
    assert readings[telemetry.CHAT_PATH_SUMMARIES] == [({}, 1)]
    assert readings[telemetry.COMPACTIONS] == [
        ({telemetry.KIND: "window_summary", telemetry.PHASE: "pre_call"}, 1)
    ]
    assert readings[telemetry.TOKENS_SHED] == [
        (
            {telemetry.KIND: "window_summary", telemetry.PHASE: "pre_call"},
            event.tokens_before - event.tokens_after,
        )
    ]
    assert sum_by(readings[telemetry.HOOK_DURATION])[1] == 1
    (hook,) = otel.spans(telemetry.PRE_CALL_SPAN)
    (summarizer,) = otel.spans(f"chat {SUMMARY_MODEL}")
    assert summarizer.parent.span_id == hook.context.span_id  # made inside the hook


@pytest.mark.django_db
def test_chat_token_usage_is_labelled_with_the_provider_and_model_called(
    fake_llm, settings, otel, conversation
):
    # The summarizer is offline: the chat calls' labels are their own, not its.
    settings.ASSISTANT_SUMMARIZER = "offline"
    chat_client = openai.OpenAI(api_key="test-key", base_url=fake_llm.openai_url, max_retries=0)
    bedrock_model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    claude = anthropic.Anthropic(api_key="test-key", base_url=fake_llm.url, max_retries=0)
    add_message(conversation, "user", "Hello")
    chat_step(
        conversation,
        lambda r: chat_client.chat.completions.create(model="gpt-4.1-mini", **r),
        provider="openai",
    )
    add_message(conversation, "user", "Again")
    # AnthropicBedrock returns the same Message, naming the Bedrock model id.
    chat_step(
        conversation, lambda r: claude.messages.create(model=bedrock_model, max_tokens=64, **r)
    )

    usage = otel.collect()[telemetry.TOKEN_USAGE]
    labels = {
        (
            attributes[telemetry.PROVIDER],
            attributes[telemetry.REQUEST_MODEL],
            attributes[telemetry.RESPONSE_MODEL],
        )
        for attributes, _ in usage
        if attributes["assistant.caller"] == "chat"
    }
    assert labels == {
        ("openai", "gpt-4.1-mini", "gpt-4.1-mini"),
        ("aws.bedrock", bedrock_model, bedrock_model),
    }
    answers = conversation.messages.filter(role="assistant").order_by("id")
    assert list(answers.values_list("provider", "model")) == [
        ("openai", "gpt-4.1-mini"),
        ("anthropic", bedrock_model),
    ]


@pytest.mark.django_db
def test_a_gauge_counts_the_exchanges_queued_for_over_a_minute(otel, redis_client, empty_queues):
    """No worker takes them: three exchanges wait, two of them published over a minute ago."""
    conversations = [Conversation.objects.create(title=f"waiting {n}") for n in range(3)]
    for conversation in conversations:
        assert queue.enqueue(queue.POST_EXCHANGE_TASK, conversation.pk)
    assert otel.collect()[telemetry.QUEUED_STALE] == [({}, 0)]

    life = app_setting("ASSISTANT_QUEUED_MARKER_SECONDS")
    for conversation in conversations[:2]:  # as if published 61 s ago
        marker = f"assistant:queued:{queue.POST_EXCHANGE_TASK}:{conversation.pk}"
        assert redis_client.expire(marker, life - 61)

    assert otel.collect()[telemetry.QUEUED_STALE] == [({}, 2)]


@pytest.mark.django_db
def test_the_request_after_a_compaction_carries_gen_ai_conversation_compacted(fake_llm, otel):
    """The overflowed request follows no compaction; the retried one follows the
    emergency level's: only its chat span is marked (true only, never false)."""
    from tests.fake_llm import ok, overflow
    from tests.scenarios import tool_heavy_conversation

    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script_anthropic(overflow(), ok("Post 43 is fine."))
    claude = anthropic.Anthropic(api_key="test-key", base_url=fake_llm.url, max_retries=0)

    chat_step(conversation, lambda r: claude.messages.create(model=CHAT_MODEL, max_tokens=64, **r))

    first, retried = sorted(otel.spans(telemetry.CHAT_SPAN), key=lambda span: span.start_time)
    assert telemetry.CONVERSATION_COMPACTED not in first.attributes
    assert retried.attributes[telemetry.CONVERSATION_COMPACTED] is True
    assert retried.attributes[telemetry.CONVERSATION_ID] == str(conversation.pk)
    assert retried.kind == trace.SpanKind.CLIENT
