"""One model call of a host's agent loop: the pre-call hook, the request, the
call (with overflow recovery) and the recorded answer.

The host's `call_model(request)` adds what only it knows (model, max_tokens)
and calls its own SDK client, e.g.
`lambda request: client.messages.create(model=M, max_tokens=1024, **request)`,
`lambda request: client.chat.completions.create(model=M, **request)`,
`lambda request: client.responses.create(model=M, **request)`
or `lambda request: client.models.generate_content(model=M, **request)`; or the SDK's
stream (`client.messages.stream(...)`), whose text deltas go to the host's `on_text`.
`achat_step` is the same step for the SDKs' async clients.
Each provider's shapes are its module's in assistant.providers (docs/providers.rst).
With `recall=True` the model is also offered the recall tools (assistant.recall),
with `compact=True` the compact tool (assistant.summary's `run_compact`), and
`answer_tool_calls` answers them from the stored originals (compact with a shift),
the host's own tools with the host's function.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from assistant.emergency import acall_with_overflow_recovery, call_with_overflow_recovery
from assistant.history import (
    a_callable,
    a_flag,
    add_message,
    check_content,
    check_results_wanted,
    entry_point,
    fresh_state,
    instance_of,
    listening,
    one_of,
    optional_callable,
    optional_count,
    optional_seconds,
    require_live,
    validated_fields,
    write_state,
)
from assistant.models import Conversation, Message, MetadataKeys
from assistant.ops import telemetry
from assistant.ops.logs import log_event
from assistant.precall import prepare_context
from assistant.provider_compaction import ProviderStep, provider_step
from assistant.providers import (
    CHAT_PROVIDERS,
    DEFAULT_PROVIDER,
    LIFETIMES,
    CacheLifetime,
    OnText,
    Wire,
    aread_answer,
    read_answer,
    wire_of,
)
from assistant.recall import (
    COMPACT,
    RECALL_SCOPES,
    RecallScope,
    app_tools,
    is_recall_tool,
    run_tool_call,
)
from assistant.responses import record_response
from assistant.settings.conf import compaction_config
from assistant.signals import COMPLETED, ENDED, CompactionNotice
from assistant.summary import run_compact
from assistant.window import (
    LIFETIME_KEY,
    Context,
    conversation_config,
    request_lifetime,
    with_lifetime,
)

#: What a step hands its `on_compaction`: each compaction's start and its one end.
OnCompaction = Callable[[CompactionNotice], Any]

#: The providers whose wire format ``chat_step`` speaks.
PROVIDERS = CHAT_PROVIDERS

# chat_step's and achat_step's arguments, checked before anything is called or written.
_STEP_CHECKS = {
    "call_model": a_callable,
    "recall": a_flag,
    "compact": a_flag,
    "window_tokens": optional_count,
    "on_text": optional_callable,
    "on_compaction": optional_callable,
    "deadline": optional_seconds,
}


def _sync_callable(name: str, value: Any) -> None:
    """chat_step awaits nothing: a coroutine function is achat_step's."""
    optional_callable(name, value)
    if inspect.iscoroutinefunction(value):
        raise ValidationError(
            f"{name} is a coroutine function: chat_step cannot await it (use achat_step).",
            code=f"async_{name}",
        )


_SYNC_STEP_CHECKS = {**_STEP_CHECKS, "on_compaction": _sync_callable}


class _Compactions:
    """A step's compactions: each start and end to the host's `on_compaction` (a
    coroutine's result awaited on the step's event loop, from the worker thread the
    database work runs in), and whether the next request follows a completed one
    (its chat span's gen_ai.conversation.compacted)."""

    def __init__(
        self, on_compaction: OnCompaction | None, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.on_compaction = on_compaction
        self.loop = loop
        self.loop_thread = threading.get_ident() if loop is not None else None
        self.since_request = False

    def __call__(self, notice: CompactionNotice) -> None:
        if notice.phase == ENDED and notice.status == COMPLETED:
            self.since_request = True
        if self.on_compaction is None:
            return
        result = self.on_compaction(notice)
        if inspect.isawaitable(result):
            self._wait(result, notice)

    def _wait(self, result: Awaitable[Any], notice: CompactionNotice) -> None:
        if self.loop is None:  # chat_step: no loop to await it on
            if inspect.iscoroutine(result):
                result.close()
            log_event(
                "compaction_callback_not_awaited",
                level=logging.WARNING,
                conversation_id=notice.conversation_id,
                reason="chat_step awaits nothing: use achat_step for a coroutine",
            )
            return

        async def awaited() -> Any:
            return await result

        if threading.get_ident() == self.loop_thread:
            self.loop.create_task(awaited())  # on the loop itself: it cannot block here
            return
        asyncio.run_coroutine_threadsafe(awaited(), self.loop).result()

    @contextmanager
    def request(self, conversation_id: int, provider: str) -> Iterator[None]:
        """The chat span of one request, marked when a compaction came before it."""
        compacted, self.since_request = self.since_request, False
        with telemetry.chat_request(conversation_id, provider, compacted=compacted):
            yield


@dataclass(frozen=True)
class Step:
    """What one model call produced: the stored assistant message and the SDK's response
    (for a stream, its final message: Anthropic's Message, the Responses API's Response,
    or a ChatResult assembled from Chat Completions' or Gemini's chunks)."""

    message: Message
    response: Any

    @property
    def text(self) -> str:
        return self.message.content

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """[{id, name, arguments}], ids as stored (made up where Gemini sent none): answer
        each with add_message(conversation, "tool", result, tool_call_id=call["id"])."""
        return list(self.message.tool_calls or [])


@entry_point(context=instance_of(Context), recall=a_flag, compact=a_flag)
def model_request(
    context: Context,
    provider: str = DEFAULT_PROVIDER,
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    recall: bool = False,
    compact: bool = False,
) -> dict[str, Any]:
    """The keyword arguments of the provider's SDK call for this context, but the model
    (and the output cap): Anthropic's `messages.create` gets system, messages and tools;
    OpenAI's `chat.completions.create` messages and tools; its `responses.create`
    instructions, input items, tools and store=False; google-genai's
    `models.generate_content` contents and a config holding the system instruction and
    tools. `tools`: {name, description, parameters} specs; with `recall`, the recall and
    search_history tools after them; with `compact`, the compact tool after those."""
    chosen = wire_of(provider)
    tools = _with_app_tools(tools, recall, compact)
    return context.request(chosen, list(tools) if tools else None)


def remember_chat_tools(conversation: Conversation, tools: Sequence[dict[str, Any]] | None) -> None:
    """Keep the tool specs the host's model call sends ({name, description,
    parameters}; None or [] for none), so that a "cached_suffix" window summary sends
    them too: Anthropic caches tools ahead of the system prompt, and a request without
    them would miss the cache. chat_step calls it; a host with its own loop calls it
    when its tools change. Stored only under SUMMARY_REQUEST "cached_suffix", and
    written only when they changed. Tool specs are definitions, never secrets."""
    if compaction_config().SUMMARY_REQUEST != "cached_suffix":
        return
    specs = _tool_specs(tools)
    # As JSON text: jsonb would reorder the schemas' keys, and the bytes must match.
    stored = json.dumps(specs, ensure_ascii=False) if specs else None
    if fresh_state(conversation.pk).chat_tools == stored:
        return
    write_state(Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.CHAT_TOOLS: stored})


def _tool_specs(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if (
        isinstance(tools, (str, bytes))
        or not isinstance(tools, Sequence)
        or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"] for t in tools
        )
    ):
        raise ValidationError(
            "tools must be a list of {name, description, parameters} specs.", code="invalid_tools"
        )
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t.get("parameters"),
        }
        for t in tools
    ]


def _with_app_tools(
    tools: Sequence[dict[str, Any]] | None, recall: bool, compact: bool
) -> Sequence[dict[str, Any]] | None:
    """The host's tools, then the app's it asked for; a host tool named as one of
    those is refused (`compact` only when compact=True)."""
    if not (recall or compact):
        return tools
    for tool in tools or ():
        if recall and is_recall_tool(tool["name"]):
            raise ValidationError(
                f"The host's tools already have a tool named {tool['name']!r}, a name of "
                "the recall tools: rename it, or pass recall=False.",
                code="tool_name_taken",
            )
        if compact and tool["name"] == COMPACT:
            raise ValidationError(
                f"The host's tools already have a tool named {COMPACT!r}, the name of the "
                "compact tool: rename it, or pass compact=False.",
                code="tool_name_taken",
            )
    return [*(tools or ()), *app_tools(recall=recall, compact=compact)]


@entry_point(**_SYNC_STEP_CHECKS)
def chat_step(
    conversation: Conversation,
    call_model: Callable[[dict[str, Any]], Any],
    *,
    provider: str = DEFAULT_PROVIDER,
    tools: Sequence[dict[str, Any]] | None = None,
    recall: bool = False,
    compact: bool = False,
    window_tokens: int | None = None,
    on_text: OnText | None = None,
    on_compaction: OnCompaction | None = None,
    deadline: float | None = None,
    **fields: Any,
) -> Step:
    """Run the pre-call hook, build the request (`model_request`; `recall` offers the
    recall tools beside `tools`), call `call_model(request)` with overflow recovery
    (emergency compaction and a retry on a context-overflow error; `window_tokens` as in
    call_with_overflow_recovery) and record the response with its whole usage
    (`record_response`; `fields` go to it). `call_model` may return the SDK's stream
    (docs/chat-loop.rst): `on_text` is given each text delta as it arrives (a plain
    response's whole text at once), and the final message is recorded; a stream that
    breaks after text arrived raises StreamInterrupted and records nothing. Call it
    again while the step has tool calls, after adding their results
    (`answer_tool_calls`). A step with no tool calls ends the turn, an empty answer too
    (stored as it came; requests leave it out). Bad arguments and a deleted
    conversation are refused before anything is written or any model called: `fields`
    too, as the answer's message would be (`unknown_field` for an unknown one).
    `deadline`: seconds the whole step may take, the SDK's own retries and their waits
    included. Each request carries the time left as its `timeout` (Gemini: its config's
    `http_options`), which bounds one attempt only: the SDK retries with the same
    timeout and sleeps as long as a `retry-after` says, and no request keyword turns
    its retries off. So the step stops waiting for the call itself once the deadline
    is spent (TimeoutError; a retry already under way runs on in the SDK's thread, and
    its answer is not recorded: build the client with max_retries=0 where that
    matters); no request is sent past it either. docs/chat-loop.rst, "Timeouts and
    retries". `on_compaction` is handed each compaction the step makes, its start and
    its one end (a `CompactionNotice`; docs/chat-loop.rst, "Compaction events"); one
    that raises is logged and the step goes on; a coroutine function is refused
    (`async_on_compaction`: achat_step awaits it)."""
    ends = _ends(deadline)
    chosen, sent = _checked(provider, tools, recall, compact, fields)
    compactions = _Compactions(on_compaction)

    lifetime: list[CacheLifetime | None] = [None]

    def call(context: Context) -> Any:
        lifetime[0] = request_lifetime(context.conversation_id, provider, context.tokens.total)
        request = _request(context, provider, tools, (recall, compact), step, ends, lifetime[0])
        with compactions.request(conversation.pk, provider):
            return read_answer(chosen, _within(ends, call_model, request), on_text)

    with listening(compactions):
        step, prepared = _before_call(conversation, sent, chosen, call_model)
        response = call_with_overflow_recovery(
            conversation, call, window_tokens=window_tokens, context=prepared
        )
        message = record_response(
            conversation, response, provider=provider, **_with_lifetime(fields, lifetime[0])
        )
    return Step(message, response)


@entry_point(**_STEP_CHECKS)
async def achat_step(
    conversation: Conversation,
    call_model: Callable[[dict[str, Any]], Any],
    *,
    provider: str = DEFAULT_PROVIDER,
    tools: Sequence[dict[str, Any]] | None = None,
    recall: bool = False,
    compact: bool = False,
    window_tokens: int | None = None,
    on_text: OnText | None = None,
    on_compaction: OnCompaction | None = None,
    deadline: float | None = None,
    **fields: Any,
) -> Step:
    """chat_step, awaitable, for the SDKs' async clients: `call_model(request)` returns
    an awaitable (`AsyncAnthropic().messages.create(...)`, `AsyncOpenAI()...create(...)`,
    `genai.Client().aio.models.generate_content(...)`) or an async stream
    (`AsyncAnthropic().messages.stream(...)`); `on_text` may be a coroutine function.
    The database work (the hook, the context, overflow recovery, the record) runs in
    a worker thread (`sync_to_async`), never on the event loop. `deadline` bounds the
    whole step as chat_step's does; here the call (its SDK retries and their sleeps,
    a stream's reading too) is cancelled once it is spent (TimeoutError).
    `on_compaction` may be a coroutine function: each start and end is awaited as it
    comes, the step's database work waiting for it."""
    ends = _ends(deadline)
    chosen, sent = _checked(provider, tools, recall, compact, fields)
    compactions = _Compactions(on_compaction, asyncio.get_running_loop())

    lifetime: list[CacheLifetime | None] = [None]

    async def call(context: Context) -> Any:
        lifetime[0] = await sync_to_async(request_lifetime)(
            context.conversation_id, provider, context.tokens.total
        )
        request = _request(context, provider, tools, (recall, compact), step, ends, lifetime[0])
        with compactions.request(conversation.pk, provider):
            return await _awithin(ends, aread_answer(chosen, call_model(request), on_text))

    with listening(compactions):
        step, prepared = await sync_to_async(_before_call)(conversation, sent, chosen, call_model)
        response = await acall_with_overflow_recovery(
            conversation, call, window_tokens=window_tokens, context=prepared
        )
        message = await sync_to_async(record_response)(
            conversation, response, provider=provider, **_with_lifetime(fields, lifetime[0])
        )
    return Step(message, response)


def _checked(
    provider: str,
    tools: Sequence[dict[str, Any]] | None,
    recall: bool,
    compact: bool,
    fields: dict[str, Any],
) -> tuple[Wire, Sequence[dict[str, Any]] | None]:
    """The provider's wire and the tools sent; an unknown provider, bad tools, a name
    clash with the app's tools asked for and fields the answer's message could not
    store are refused before any call."""
    chosen = wire_of(provider)
    _tool_specs(tools)
    validated_fields(Message.Role.ASSISTANT, fields)
    return chosen, _with_app_tools(tools, recall, compact)


def _before_call(
    conversation: Conversation,
    sent: Sequence[dict[str, Any]] | None,
    chosen: Wire,
    call_model: Callable[[dict[str, Any]], Any],
) -> tuple[ProviderStep, Context | None]:
    """The checks, the tools remembered, and the pre-call hook with the context it
    left, or the provider's compaction in its place (PROVIDER_COMPACTION,
    docs/provider-compaction.rst: no context yet)."""
    require_live(conversation)
    remember_chat_tools(conversation, sent)
    neutral = list(sent) if sent else None
    step = provider_step(
        conversation, chosen, conversation_config(conversation.pk), call_model, neutral
    )
    if not step.run_hook:
        return step, None
    return step, prepare_context(conversation, on_demand=step.on_demand)


def _request(
    context: Context,
    provider: str,
    tools: Sequence[dict[str, Any]] | None,
    offered: tuple[bool, bool],
    step: ProviderStep,
    ends: float | None,
    lifetime: CacheLifetime | None = None,
) -> dict[str, Any]:
    """model_request (`offered`: recall, compact), with what asks the provider for its
    own compaction and for the cache `lifetime` (`with_lifetime`: docs/compaction.rst,
    "Cache lifetimes"), bounded by the time left before `ends` (a time.monotonic()
    instant) when the step has one."""
    recall, compact = offered
    built = model_request(context, provider, tools, recall=recall, compact=compact)
    request = {**built, **(step.extras or {})}
    request = with_lifetime(request, context.conversation_id, provider, lifetime)
    if ends is None:
        return request
    left = ends - time.monotonic()
    if left <= 0:
        raise TimeoutError("chat_step's deadline passed before the model call could be made.")
    return wire_of(provider).with_timeout(request, left)


# The providers' default lifetimes (assistant.providers.LIFETIMES), not recorded.
_DEFAULT_LIFETIMES = {table[0].name for table in LIFETIMES.values()}


def _with_lifetime(fields: dict[str, Any], lifetime: CacheLifetime | None) -> dict[str, Any]:
    """The answer's fields with the lifetime its request asked for, in its metadata
    (what the next pre-call hook judges the cache's warmth by), where it is not the
    provider's default (CACHE_TTL_SECONDS stands for that one)."""
    if lifetime is None or lifetime.name in _DEFAULT_LIFETIMES:
        return fields
    metadata = {**(fields.get("metadata") or {}), LIFETIME_KEY: lifetime.name}
    return {**fields, "metadata": metadata}


def _ends(deadline: float | None) -> float | None:
    return None if deadline is None else time.monotonic() + deadline


# How long past the deadline the step still waits for the SDK's own timeout error of an
# attempt that carried the time left: that error says more than the step's TimeoutError.
_GRACE_SECONDS = 0.5


def _within(
    ends: float | None, call_model: Callable[[dict[str, Any]], Any], request: dict[str, Any]
) -> Any:
    """call_model(request), waited for until `ends` (and the grace) at most: the SDK's
    retries run inside the call, each with the request's whole timeout and a sleep
    between, so only the step's own wait bounds them all."""
    if ends is None:
        return call_model(request)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chat_step_call")
    try:
        # The host's context variables (tracing spans, request ids) go with the call.
        future = pool.submit(contextvars.copy_context().run, call_model, request)
        try:
            return future.result(timeout=max(0.0, ends - time.monotonic()) + _GRACE_SECONDS)
        except FutureTimeout:
            raise _spent() from None
    finally:
        pool.shutdown(wait=False)


async def _awithin(ends: float | None, answer: Awaitable[Any]) -> Any:
    """`answer` awaited until `ends` (and the grace) at most, then cancelled: its SDK
    retries and their sleeps with it."""
    if ends is None:
        return await answer
    bound = asyncio.timeout(max(0.0, ends - time.monotonic()) + _GRACE_SECONDS)
    try:
        async with bound:
            return await answer
    except TimeoutError:
        if bound.expired():
            raise _spent() from None
        raise


def _spent() -> TimeoutError:
    return TimeoutError(
        "chat_step's deadline was spent before the model's answer came (the SDK's retries "
        "included)."
    )


@entry_point(run_tool=a_callable, compact=a_flag, recall_scope=one_of(*RECALL_SCOPES))
def answer_tool_calls(
    conversation: Conversation,
    tool_calls: Sequence[dict[str, Any]],
    run_tool: Callable[[str, dict[str, Any]], str],
    *,
    compact: bool = True,
    recall_scope: RecallScope = "conversation",
) -> list[Message]:
    """Run each call and store its result, in order: `recall` and `search_history` are
    answered from the stored originals (`run_tool_call`), `compact` with a shift of the
    window (`run_compact`: at most once per turn, refused with a text when it would free
    less than COMPACT_MIN_FREE_TOKENS; pass compact=False when `compact` is a host
    tool of yours, offered with compact=False), any other by the host's
    `run_tool(name, arguments)`, which returns the result as text (`recall_scope`:
    run_tool_call's, "user" to search the user's other conversations too). Calls that are
    not {id, name, arguments}, an id that names no call waiting for its result (or
    twice) and a deleted conversation are refused before any runs; the results are
    checked before any is stored, so a result add_message would refuse (not text,
    `content_too_large`) stores none of them and leaves the calls to answer again."""
    _check_tool_calls(tool_calls)
    require_live(conversation)
    check_results_wanted(conversation, [call["id"] for call in tool_calls])
    texts = []
    for call in tool_calls:
        if is_recall_tool(call["name"]):
            text = run_tool_call(
                conversation, call["name"], call["arguments"], recall_scope=recall_scope
            )
        elif compact and call["name"] == COMPACT:
            text = run_compact(conversation, call["arguments"])
        else:
            text = run_tool(call["name"], call["arguments"])
        check_content(f"The result of tool call {call['id']!r}", text)
        texts.append(text)
    return [
        add_message(conversation, "tool", text, tool_call_id=call["id"])
        for call, text in zip(tool_calls, texts, strict=True)
    ]


def _check_tool_calls(tool_calls: Sequence[dict[str, Any]]) -> None:
    if (
        isinstance(tool_calls, (str, bytes))
        or not isinstance(tool_calls, Sequence)
        or not all(
            isinstance(call, dict)
            and isinstance(call.get("id"), str)
            and isinstance(call.get("name"), str)
            and "arguments" in call
            for call in tool_calls
        )
    ):
        raise ValidationError(
            "tool_calls must be a list of {id, name, arguments} calls, as Step.tool_calls.",
            code="invalid_tool_calls",
        )
