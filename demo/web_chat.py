"""A web chat that streams (docs/chat-loop.rst, "A web chat"): a page posts the
user's message, then reads the answer as server-sent events while the model writes
it, and "compacting…" then "compacted" while the app compacts before the call. Typed
commands /new, /clear, /resume and /status work on the chat's sessions; a user
message can be edited (a branch) and its branches flipped ("< 2/3 >"), and the chat
summarized before or after a message. Async views, served over ASGI; the page's
template ships in the app."""

import asyncio
import functools
import json
import logging

import anthropic
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseRedirect, JsonResponse, StreamingHttpResponse
from django.shortcuts import aget_object_or_404, render
from django.views.decorators.http import require_POST

from assistant.models import Conversation
from assistant.services import (
    achat_step,
    add_message,
    context_status,
    conversation_tree,
    finish_exchange,
    fork_from_message,
    list_sessions,
    new_session,
    resume_session,
    set_active_branch,
    summarize_after,
    summarize_before,
)

logger = logging.getLogger(__name__)
COMMANDS = "/new, /clear, /resume [id], /status"


@functools.cache
def claude():
    return anthropic.AsyncAnthropic()  # reads ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)


def call_claude(request):  # the SDK's stream: achat_step enters it and reads it
    return claude().messages.stream(model="claude-sonnet-4-6", max_tokens=1024, **request)


def page_of(request, conversation_id, other):  # ".../5/send" -> ".../9/": a chat's page
    return f"{request.path.rsplit(f'/{conversation_id}/', 1)[0]}/{other.pk}/"


async def chat_page(request, conversation_id):  # at .../<id>/: send and stream follow it
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    urls = {"send_url": f"{request.path}send", "stream_url": f"{request.path}stream"}
    urls |= {"edit_url": f"{request.path}edit", "switch_url": f"{request.path}switch"}
    urls |= {"cut_url": f"{request.path}cut"}
    messages = await sync_to_async(transcript)(conversation)
    pending = bool(messages) and messages[-1]["role"] == "user"  # answer it on opening
    context = {"conversation": conversation, "messages": messages, "pending": pending}
    return render(request, "assistant/web_chat.html", {**context, **urls})


def transcript(conversation):
    """The chat's user and assistant texts; a user message with branches carries its
    siblings ("< 2/3 >"): those leaving at it here, or, for the edit a branch starts
    with, those leaving its parent at the message it replaces."""
    tree = conversation_tree(conversation)
    here = tree.find(conversation)
    parent = tree.find(conversation.parent_conversation_id or 0)
    edit = conversation.parent_link == Conversation.Link.BRANCH and parent is not None
    rows = []
    for message in conversation.messages.filter(role__in=["user", "assistant"]).order_by("id"):
        if not message.content:
            continue  # a step that only called tools
        siblings = []
        if message.role == "user" and "copied_from" not in message.metadata:
            at = here.siblings_at(message.pk) if here else []
            if edit:  # the first message of its own: the edit of its parent's message
                at, edit = parent.siblings_at(conversation.fork_message_id), False
            siblings = [node.conversation.pk for node in at] if len(at) > 1 else []
        rows.append({"id": message.pk, "role": message.role, "text": message.content})
        rows[-1] |= sibling_links(siblings, conversation.pk)
    return rows


def sibling_links(siblings, shown):
    """The place of the shown sibling among them and its neighbours' ids."""
    if shown not in siblings:
        return {"siblings": len(siblings), "place": 0}
    place = siblings.index(shown)
    return {
        "siblings": len(siblings),
        "place": place + 1,
        "previous": siblings[place - 1] if place > 0 else None,
        "next": siblings[place + 1] if place + 1 < len(siblings) else None,
    }


@require_POST
async def send_message(request, conversation_id):
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    text = request.POST["text"]
    if text.startswith("/"):  # a command: answered at once, nothing sent to the model
        answer = await sync_to_async(run_command)(conversation, text.split())
        if "go" in answer:
            answer["go"] = page_of(request, conversation_id, answer.pop("go"))
        return JsonResponse(answer)
    await sync_to_async(add_message)(conversation, "user", text)
    return HttpResponse(status=204)


def run_command(conversation, words):
    """{"go": the conversation the chat goes on in} or {"status": a line to show}."""
    command, arguments = words[0], words[1:]
    if command in ("/new", "/clear") and not arguments:
        return {"go": new_session(conversation, carry_summary=command == "/new")}
    if command == "/status" and not arguments:
        return {"status": status_line(context_status(conversation))}
    if command == "/resume":
        sessions = {str(info.conversation.pk): info for info in list_sessions(conversation)}
        if not arguments:
            listed = "; ".join(
                f"#{pk} {info.title} ({info.size:,} tokens)" for pk, info in sessions.items()
            )
            return {"status": f"Sessions: {listed}. /resume <id> goes back to one."}
        if len(arguments) == 1 and arguments[0].lstrip("#") in sessions:
            resumed = resume_session(sessions[arguments[0].lstrip("#")].conversation)
            return {"go": resumed.conversation, "reopened": resumed.reopened}
        return {"status": f"No session {' '.join(arguments)} in this chat: /resume lists them."}
    return {"status": f"Unknown command {' '.join(words)}: the commands are {COMMANDS}."}


def status_line(status):
    line = f"{status.tokens:,} tokens of {status.trigger:,} before compaction"
    line += f" ({status.share_of_window:.1%} of {status.model}'s window)"
    summaries = f"{status.summaries} {'summary' if status.summaries == 1 else 'summaries'}"
    compactions = f"{status.compactions} compaction{'' if status.compactions == 1 else 's'}"
    return f"{line}, {summaries}, {compactions}."


@require_POST
async def edit_message(request, conversation_id):  # a branch at the message, then its answer
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    text = request.POST.get("text", "").strip()
    message_id = request.POST.get("message_id")
    branched = await sync_to_async(fork_from_message)(conversation, message_id) if text else None
    if branched is None:
        return JsonResponse(
            {"error": "Only a user message of this chat, with text, can be edited."}, status=400
        )
    branch, _ = branched
    await sync_to_async(add_message)(branch, "user", text)
    await sync_to_async(set_active_branch)(branch)
    return HttpResponseRedirect(page_of(request, conversation_id, branch))  # answers on opening


@require_POST
async def switch_branch(request, conversation_id):  # "< 2/3 >": show another sibling
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    tree = await sync_to_async(conversation_tree)(conversation)
    target = tree.find(int(request.POST["to"])) if request.POST.get("to", "").isdigit() else None
    if target is None:
        return JsonResponse(
            {"error": "That conversation is not a branch of this chat."}, status=400
        )
    await sync_to_async(set_active_branch)(target.conversation)
    return HttpResponseRedirect(page_of(request, conversation_id, target.conversation))


@require_POST
async def cut(request, conversation_id):  # summarize everything before, or after, a message
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    summarize = {"before": summarize_before, "after": summarize_after}.get(request.POST.get("side"))
    if summarize is None:
        return JsonResponse({"error": "Summarize before or after a message."}, status=400)
    try:
        message_id = request.POST.get("message_id", "")
        message_id = int(message_id) if message_id.isdigit() else message_id
        outcome = await sync_to_async(summarize)(conversation, message_id)
    except ValidationError as refused:  # already summarized, nothing after it...
        return JsonResponse({"error": " ".join(refused.messages)}, status=400)
    return JsonResponse({"status": outcome.message})


async def stream_answer(request, conversation_id):
    conversation = await aget_object_or_404(Conversation, pk=conversation_id)
    events = answer_events(conversation)
    return StreamingHttpResponse(
        events, content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def event(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def compaction_shown(notice):  # a CompactionNotice, as the page shows it
    if notice.status is None:
        return {"status": "compacting", "kind": notice.kind}
    shown = {"status": notice.status, "kind": notice.kind, "before": notice.tokens_before}
    return shown | {"after": notice.tokens_after}


async def answer_events(conversation):
    """Each compaction's start and end as a "compaction" event, each text delta as a
    "delta" event while the model writes, then "done" once the answer is recorded (or
    "failed")."""
    newest = await conversation.messages.order_by("-id").afirst()
    if newest is None or newest.role != "user":  # answered already (a reconnect)
        yield event("done", {"text": newest.content if newest else ""})
        return
    events = asyncio.Queue()

    async def compaction(notice):  # awaited on the event loop, as it happens
        await events.put(event("compaction", compaction_shown(notice)))

    step = asyncio.create_task(
        achat_step(
            conversation,
            call_claude,
            on_text=lambda delta: events.put_nowait(event("delta", delta)),
            on_compaction=compaction,
        )
    )
    step.add_done_callback(lambda _: events.put_nowait(None))
    try:
        while (shown := await events.get()) is not None:
            yield shown
        answer = await step
    except Exception:  # StreamInterrupted, an API error: nothing recorded, ask again
        logger.exception("web_chat_failed conversation=%s", conversation.pk)
        yield event("failed", "The answer failed: send your message again.")
        return
    finally:
        step.cancel()  # the browser left: no half answer is recorded
    await sync_to_async(finish_exchange)(conversation)
    yield event("done", {"text": answer.text, "output_tokens": answer.message.output_tokens})
