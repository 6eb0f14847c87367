"""ASGI entry point served by Daphne: Django for HTTP, the hub for WebSockets."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

django_asgi_app = get_asgi_application()

# Imports that need Django set up first.
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import re_path  # noqa: E402

from messenger_realtime.asgi import with_hub  # noqa: E402

# The hub's routes first: its WebSocket, negotiate, Server-Sent Events and long polling
# at /hubs/messenger (bearer tokens, or the session of the project's own pages). Under
# Daphne, with_hub also sets up the server as the app needs it (messenger_realtime/asgi.py).
application = with_hub(
    ProtocolTypeRouter(
        {
            "http": URLRouter(
                [
                    # Django, with static files (the web client, the demo page) straight
                    # from the app and npm; production puts collectstatic's output on a CDN.
                    re_path(r"", ASGIStaticFilesHandler(django_asgi_app)),  # type: ignore[arg-type]
                ]
            ),
        }
    )
)
