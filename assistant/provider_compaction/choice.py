"""Which compaction a chat step runs under PROVIDER_COMPACTION (docs/provider-compaction.rst).

"ours": the pre-call hook, as always. "provider": where the wire has a server-side
compaction, the request asks for it at the trigger and the hook is not run, unless
the provider's newest compaction failed (no summary) and no window shift of ours
came after it: then ours runs, never nothing. "auto": the hook runs, and a window
shift it would make is the provider's on-demand compaction instead, made through
the host's own `call_model` (OpenAI's, which call_model cannot reach, with the app's
own client: assistant.providers.registry); a failed one (an error, or no summary) leaves the
shift to ours. What the provider returns is stored by assistant.provider_compaction.recording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from assistant.models import Conversation, Message
from assistant.ops.logs import log_event
from assistant.provider_compaction import recording as provider_compaction
from assistant.providers import (
    WIRES,
    Wire,
    aread_answer,
    asynchronous,
    get_provider,
    read_answer,
    read_response,
)
from assistant.settings.conf import CompactionConfig
from assistant.window import Shift, WindowState, context_before

# The host's call: request keyword arguments in, the SDK's answer (or stream) out.
CallModel = Callable[[dict[str, Any]], Any]
# Given the window and the shift the hook would make: True when the provider made it.
OnDemand = Callable[[WindowState, Shift], bool]


@dataclass(frozen=True)
class ProviderStep:
    """What a chat step does about compaction: whether the pre-call hook runs, what the
    request adds to ask the provider for its compaction, and the hook's on-demand one."""

    run_hook: bool = True
    extras: dict[str, Any] | None = None
    on_demand: OnDemand | None = None


def provider_step(
    conversation: Conversation,
    wire: Wire,
    config: CompactionConfig,
    call_model: CallModel,
    tools: list[dict[str, Any]] | None,
) -> ProviderStep:
    """What chat_step does about compaction under PROVIDER_COMPACTION with `wire`."""
    mode = config.PROVIDER_COMPACTION
    if mode == "provider":
        extras = wire.threshold_compaction(config.CONTEXT_TOKEN_THRESHOLD)
        if extras is None or ours_after_failure(conversation.pk):
            return ProviderStep()
        return ProviderStep(run_hook=False, extras=extras)
    if mode == "auto" and (  # the wire has an on-demand compaction
        wire.on_demand_compaction({}) is not None or wire.compaction_endpoint({}, "") is not None
    ):
        return ProviderStep(on_demand=on_demand(conversation, wire, call_model, tools))
    return ProviderStep()


def provider_compacts(state: WindowState, config: CompactionConfig) -> bool:
    """Under "provider", whether the wire of the window's newest answer compacts on its
    side (so no window summary of ours will be needed while it does)."""
    name = state.answered_by[0]
    if config.PROVIDER_COMPACTION != "provider" or name not in WIRES:
        return False
    extras = WIRES[name].threshold_compaction(config.CONTEXT_TOKEN_THRESHOLD)
    return extras is not None and not ours_after_failure(state.conversation_id)


def ours_after_failure(conversation_id: int) -> bool:
    """The provider's newest compaction failed and no window shift of ours came after it."""
    newest = (
        Message.objects.filter(conversation_id=conversation_id, provider_compaction__isnull=False)
        .order_by("-id")
        .values_list("id", "provider_compaction__live")
        .first()
    )
    if newest is None or newest[1]:
        return False
    through = Conversation.objects.get(pk=conversation_id).compaction_through_message_id
    return through is None or through < newest[0]


def on_demand(
    conversation: Conversation,
    wire: Wire,
    call_model: CallModel,
    tools: list[dict[str, Any]] | None,
) -> OnDemand:
    def compact(state: WindowState, shift: Shift) -> bool:
        return compact_on_demand(state, shift, wire, call_model, tools)

    return compact


def compact_on_demand(
    state: WindowState,
    shift: Shift,
    wire: Wire,
    call_model: CallModel,
    tools: list[dict[str, Any]] | None,
) -> bool:
    """Ask the provider to compact what the shift would summarize: everything before
    the first message the shift keeps that is not a tool result (a result goes with
    its call), which then carries the block."""
    kept = next(
        (row for row in state.rows[shift.start or 0 :] if row.role != Message.Role.TOOL), None
    )
    if shift.start is None or kept is None or kept.pk == state.rows[0].pk:
        return False
    request = context_before(state, kept.pk).request(wire, tools)
    try:
        stored, model = compacted(wire, request, state.answered_by[1], call_model)
    except Exception as error:  # any provider failure: ours makes the shift
        log_event(
            "provider_compaction_failed",
            conversation_id=state.conversation_id,
            error=type(error).__name__,
        )
        return False
    if stored is None:
        log_event("provider_compaction_failed", conversation_id=state.conversation_id)
        return False
    before = state.context_tokens()
    if stored["live"]:
        provider_compaction.attach(kept, stored)
    provider_compaction.record_event(kept, stored, model=model, before=before)
    return bool(stored["live"])


def compacted(
    wire: Wire, request: dict[str, Any], model: str, call_model: CallModel
) -> tuple[dict[str, Any] | None, str]:
    """The provider's on-demand compaction of `request`, as stored, and the model that
    made it: through the host's call_model, or, where that cannot reach it (OpenAI's
    `responses.compact`), through the app's own client of that provider (ASSISTANT_LLM's
    key and base URL; with none configured it fails, and ours makes the shift)."""
    endpoint = wire.compaction_endpoint(request, model)
    if endpoint is not None and wire.endpoint_provider is not None:
        return wire.compacted(get_provider(wire.endpoint_provider).compact(endpoint)), model
    on_demand = wire.on_demand_compaction(request)
    assert on_demand is not None  # provider_step checked the wire has one
    returned = call_model(on_demand)
    if asynchronous(returned):  # achat_step: this runs in its worker thread
        answer = async_to_sync(aread_answer)(wire, returned, None)
    else:
        answer = read_answer(wire, returned, None)
    result = read_response(answer)
    return (None, model) if result is None else (result.compaction, result.model)
