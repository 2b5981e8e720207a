"""A web chat that streams (docs/chat-loop.rst, "A web chat"): a page posts the
user's message, then reads the answer as server-sent events while the model writes
it. Async views, served over ASGI; the page's template ships in the app."""

import asyncio
import functools
import json
import logging

import anthropic
from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import aget_object_or_404, render
from django.views.decorators.http import require_POST

from assistant.models import Conversation
from assistant.services import achat_step, add_message, finish_exchange

logger = logging.getLogger(__name__)


@functools.cache
def claude():
    return anthropic.AsyncAnthropic()  # reads ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)


def call_claude(request):  # the SDK's stream: achat_step enters it and reads it
    return claude().messages.stream(model="claude-sonnet-4-6", max_tokens=1024, **request)


async def chat_page(request, conversation_id):  # at .../<id>/: send and stream follow it
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    urls = {"send_url": f"{request.path}send", "stream_url": f"{request.path}stream"}
    return render(request, "assistant/web_chat.html", {"conversation": conversation, **urls})


@require_POST
async def send_message(request, conversation_id):
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    await sync_to_async(add_message)(conversation, "user", request.POST["text"])
    return HttpResponse(status=204)


async def stream_answer(request, conversation_id):
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    events = answer_events(conversation)
    return StreamingHttpResponse(
        events, content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def event(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def answer_events(conversation):
    """Each text delta as a "delta" event while the model writes, then "done" once the
    answer is recorded (or "failed")."""
    newest = await conversation.messages.order_by("-id").afirst()
    if newest is None or newest.role != "user":  # answered already (a reconnect)
        yield event("done", {"text": newest.content if newest else ""})
        return
    deltas = asyncio.Queue()
    step = asyncio.create_task(achat_step(conversation, call_claude, on_text=deltas.put_nowait))
    step.add_done_callback(lambda _: deltas.put_nowait(None))
    try:
        while (delta := await deltas.get()) is not None:
            yield event("delta", delta)
        answer = await step
    except Exception:  # StreamInterrupted, an API error: nothing recorded, ask again
        logger.exception("web_chat_failed conversation=%s", conversation.pk)
        yield event("failed", "The answer failed: send your message again.")
        return
    finally:
        step.cancel()  # the browser left: no half answer is recorded
    await sync_to_async(finish_exchange)(conversation)
    yield event("done", {"text": answer.text, "output_tokens": answer.message.output_tokens})
