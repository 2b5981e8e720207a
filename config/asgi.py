"""The demo project over ASGI (`uvicorn config.asgi:application`): what the streaming
chat (demo/web_chat.py) needs to send its answer as it is written."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_asgi_application()
