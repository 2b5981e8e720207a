"""Demo scenes for `make demo`: an overflow recovered, then a fork and a branch.

The overflow is real as far as the code under demonstration can tell: the
official `anthropic` SDK sends the request and parses the answer, and the
answer is the API's own 400 body for a prompt that is too long, so the SDK
raises its own `BadRequestError`. Only the transport is local (no network
and no key are needed): an in-process handler that plays a model with a small
context window, counting the request's tokens the way our estimates do.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import anthropic
import httpx2

from assistant.history.figures import measures, token_change, token_count
from assistant.models import CompactionEvent, Conversation
from assistant.settings.conf import compaction_config

DEMO_MODEL = "claude-demo-small-window"
DEMO_WINDOW_TOKENS = 2_500


class SmallWindowModel:
    """An in-process stand-in for the Messages API whose window is
    `window_tokens`: over it, the real overflow error body; under it, a short
    answer with usage. Records every request it saw."""

    def __init__(self, window_tokens: int = DEMO_WINDOW_TOKENS) -> None:
        self.window_tokens = window_tokens
        self.requests: list[int] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        chars = len(json.dumps(body.get("system", ""))) + len(json.dumps(body["messages"]))
        tokens = math.ceil(chars / compaction_config().CHARS_PER_TOKEN)
        self.requests.append(tokens)
        if tokens > self.window_tokens:
            return httpx2.Response(
                400,
                json={
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": (
                            f"prompt is too long: {tokens} tokens > {self.window_tokens} maximum"
                        ),
                    },
                    "request_id": f"req_demo_{len(self.requests)}",
                },
            )
        return httpx2.Response(
            200,
            json={
                "id": f"msg_demo_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "Post 42 is published; the feed is valid."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": tokens, "output_tokens": 12},
            },
        )

    def client(self) -> anthropic.Anthropic:
        transport = httpx2.MockTransport(self)
        return anthropic.Anthropic(
            api_key="demo-key-not-sent-anywhere",
            base_url="http://demo.invalid",
            max_retries=0,
            http_client=httpx2.Client(transport=transport),
        )


class RecallingModel:
    """An in-process stand-in for a model that reads a handle in what it was sent and
    asks for the original with the recall tool, then answers from what came back."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        last = body["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            recalled = results[0]["content"]
            recalled = recalled if isinstance(recalled, str) else recalled[0]["text"]
            heading = next(line for line in recalled.splitlines() if "<h1>" in line)
            title = heading.split("<h1>", 1)[1].split("</h1>", 1)[0]
            content = [{"type": "text", "text": f"The original says its title is “{title}”."}]
        else:
            handles = _handles_for_question(body)
            call = {"handle": handles[0]} if handles else {"query": "feed"}
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_demo_{len(self.requests)}",
                    "name": "recall" if handles else "search_history",
                    "input": call,
                }
            ]
        stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
        return httpx2.Response(
            200,
            json={
                "id": f"msg_recall_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 12},
            },
        )

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key="demo-key-not-sent-anywhere",
            base_url="http://demo.invalid",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
        )


def _handles_for_question(body: dict[str, Any]) -> list[str]:
    """The handles the request shows: first those whose index entry names something the
    user's last message names (`post/43`), then those in the messages (a compacted
    result's marker), then the rest of the summary's."""
    question = json.dumps([m["content"] for m in body["messages"] if m["role"] == "user"][-1:])
    summary, messages = json.dumps(body.get("system")), json.dumps(body["messages"])
    named = [
        handle
        for entry in re.split(r"[;,]|\\n", summary)
        for handle in re.findall(r"ref (m\d+)\b(?!\.\.)", entry)
        if any(word in question for word in re.findall(r"\w+/[\w./-]+", entry))
    ]
    shown = [h for text in (messages, summary) for h in re.findall(r"ref (m\d+)\b(?!\.\.)", text)]
    return named + shown


def run_recall_demo(stdout: Any, conversation: Conversation) -> dict[str, Any]:
    """The chat loop with the recall tools beside the host's: the model reads a handle
    of a compacted result and gets the original back as an ordinary tool result."""
    from assistant.recall import run_tool_call, tool_definitions
    from assistant.services import add_message, build_context, ensure_context_summary

    stdout.write("\n== Scene: the model recalls a compacted result by its handle ==")
    model = RecallingModel()
    client = model.client()
    add_message(conversation, "user", "What was the exact title of post/43?")
    answer = ""
    for _ in range(4):  # an agent turn: at most a few model calls here
        ensure_context_summary(conversation)
        response = client.messages.create(
            model=DEMO_MODEL,
            max_tokens=256,
            tools=tool_definitions("anthropic"),
            **build_context(conversation).to_anthropic(),
        )
        calls = [
            {"id": b.id, "name": b.name, "arguments": b.input}
            for b in response.content
            if b.type == "tool_use"
        ]
        text = "".join(b.text for b in response.content if b.type == "text")
        add_message(conversation, "assistant", text, tool_calls=calls or None)
        if not calls:
            answer = text
            break
        for call in calls:
            result = run_tool_call(conversation, call["name"], call["arguments"])
            stdout.write(f"  model calls {call['name']}({json.dumps(call['arguments'])})")
            stdout.write(f"    -> {result.splitlines()[0][:110]}")
            add_message(conversation, "tool", result, tool_call_id=call["id"])
    conversation.refresh_from_db()
    stdout.write(f"  answer: {answer}")
    stdout.write(f"  recalls counted on the conversation (admin): {conversation.recall_count}")
    return {"recall_answer": answer, "recall_count": conversation.recall_count}


def build_demo_conversation() -> Conversation:
    """A short blog-admin session whose three large tool results (about 9 KB
    of HTML) no longer fit the demo model's window."""
    from assistant.services import add_message

    conversation = Conversation.objects.create(
        title="Demo: fixing the blog before the launch", system_prompt="You are a blog admin."
    )
    pages = [("post/42", "Launch notes"), ("post/43", "Pricing"), ("feed.xml", "RSS feed")]
    for index, (path, name) in enumerate(pages, start=1):
        add_message(conversation, "user", f"Check {path} ({name}) for broken links.")
        add_message(
            conversation,
            "assistant",
            "",
            tool_calls=[{"id": f"call_{index}", "name": "fetch_url", "arguments": {"url": path}}],
        )
        html = f"<html><h1>{name}</h1>" + f"<p>{name} paragraph with a link.</p>" * 90 + "</html>"
        add_message(conversation, "tool", html, tool_call_id=f"call_{index}")
        add_message(conversation, "assistant", f"{path}: 90 paragraphs, no broken link.")
    add_message(conversation, "user", "Now publish post 42 and confirm the feed is valid.")
    return conversation


def run_overflow_and_fork_demo(stdout: Any) -> dict[str, Any]:
    """Print an overflow recovered by emergency compaction, then a fork and a
    branch of the same conversation. Returns the figures it printed."""
    from assistant.services import (
        build_context,
        call_with_overflow_recovery,
        context_tokens,
        fork_continuation,
        fork_from_message,
    )

    stdout.write("\n== Scene: the provider says the prompt is too long ==")
    conversation = build_demo_conversation()
    model = SmallWindowModel()
    client = model.client()
    attempts: list[str] = []

    def call(context):
        try:
            response = client.messages.create(
                model=DEMO_MODEL, max_tokens=256, **context.to_anthropic()
            )
        except anthropic.BadRequestError as error:
            detail = (error.body or {}).get("error", {}).get("message", error.message)
            attempts.append(f"{type(error).__name__} {error.status_code}: {detail}")
            raise
        attempts.append(f"200 OK, {response.usage.input_tokens} input tokens")
        return response

    before = context_tokens(conversation)
    stdout.write(
        f"conversation {conversation.pk}: {len(build_context(conversation).messages)} messages, "
        f"the request {token_count(before)}; the model's window: {token_count(model.window_tokens)}"
    )
    response = call_with_overflow_recovery(conversation, call, window_tokens=model.window_tokens)
    events = list(
        CompactionEvent.objects.filter(
            conversation=conversation, kind__startswith="emergency"
        ).order_by("id")
    )
    for number, attempt in enumerate(attempts, start=1):
        stdout.write(f"  attempt {number}: {attempt}")
        if number <= len(events):
            event = events[number - 1]
            stdout.write(
                f"    -> {event.get_kind_display()}, "
                f"{token_change(event.tokens_before, event.tokens_after, measures(event))} "
                f"({event.messages_affected} tool results compacted)"
            )
    stdout.write(f"  answer: {response.content[0].text}")
    stdout.write("  nothing was deleted: every original is kept and can be restored")
    recalled = run_recall_demo(stdout, conversation)

    stdout.write("\n== Scene: continue in a new conversation, and branch from a message ==")
    fork = fork_continuation(
        conversation, pending_user_message="Also schedule the newsletter.", tool_services=["blog"]
    )
    summary = fork.parent_conversation_summary or ""
    stdout.write(
        f"fork {fork.pk}: “{fork.title}” (parent {conversation.pk}, tools {fork.tool_services})"
    )
    stdout.write(f"  carries a {len(summary)}-character summary of its parent; first lines:")
    for line in [line for line in summary.splitlines() if line.strip()][:3]:
        stdout.write(f"    | {line[:100]}")
    first_user = conversation.messages.filter(role="user").order_by("id")[1]
    branch, text = fork_from_message(conversation, first_user.pk)
    stdout.write(
        f"branch {branch.pk}: “{branch.title}” at message {first_user.pk}; "
        f"text handed back to edit and resend: “{text}”"
    )
    return {
        "conversation_id": conversation.pk,
        "attempts": attempts,
        "emergency_levels": [event.kind for event in events],
        "tokens_before": before,
        "tokens_after": context_tokens(conversation),
        "fork_id": fork.pk,
        "branch_id": branch.pk,
        **recalled,
    }
