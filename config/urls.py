from django.contrib import admin
from django.urls import path

from assistant.views import healthz, readyz
from demo import web_chat

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    # The streaming web chat (docs/chat-loop.rst), served over ASGI: config/asgi.py.
    path("chat/<int:conversation_id>/", web_chat.chat_page, name="demo-chat"),
    path("chat/<int:conversation_id>/send", web_chat.send_message, name="demo-chat-send"),
    path("chat/<int:conversation_id>/stream", web_chat.stream_answer, name="demo-chat-stream"),
    path("chat/<int:conversation_id>/edit", web_chat.edit_message, name="demo-chat-edit"),
    path("chat/<int:conversation_id>/switch", web_chat.switch_branch, name="demo-chat-switch"),
    path("chat/<int:conversation_id>/cut", web_chat.cut, name="demo-chat-cut"),
]
