"""Known conversations for the fork, emergency and admin tests."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User

from assistant.models import Conversation, Message
from assistant.services import add_message

BIG_RESULT = "<html>" + "post body " * 300 + "</html>"  # 3,013 chars
SMALL_RESULT = "status: 200, 12 rows"


def tool_heavy_conversation(title: str = "Blog admin session", user: User | None = None):
    """20 messages: a tool turn with a 3 KB result, five plain turns, a tool
    turn with a small result, and a last plain turn. Returns (conversation,
    messages in order)."""
    conversation = Conversation.objects.create(title=title, user=user, system_prompt="You help.")
    add_message(conversation, "user", "Fix post 42, its title is wrong.")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "read_post", "arguments": {"id": 42}}],
    )
    add_message(conversation, "tool", BIG_RESULT, tool_call_id="c1")
    add_message(conversation, "assistant", "Post 42 is titled 'Helo'. I fixed it.")
    for n in range(5):
        add_message(conversation, "user", f"Question {n}: what about post {100 + n}?")
        add_message(conversation, "assistant", f"Post {100 + n} looks fine.")
    add_message(conversation, "user", "Check the URL https://example.org/feed.xml")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c2", "name": "fetch_url", "arguments": {"url": "feed.xml"}}],
    )
    add_message(conversation, "tool", SMALL_RESULT, tool_call_id="c2")
    add_message(conversation, "assistant", "The feed answers 200 with 12 rows.")
    add_message(conversation, "user", "Last question: publish post 42?")
    add_message(conversation, "assistant", "Published.")
    return conversation, list(Message.objects.filter(conversation=conversation).order_by("id"))


def staff_user(username: str = "staff", *, fork: bool = True, compact: bool = True) -> User:
    user = User.objects.create_user(username, password="pw-for-tests", is_staff=True)
    codenames = ["view_conversation", "change_conversation", "view_message"]
    codenames += ["view_summaryversion"]
    codenames += ["fork_conversation"] if fork else []
    codenames += ["compact_conversation"] if compact else []
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="assistant", codename__in=codenames)
    )
    return user
