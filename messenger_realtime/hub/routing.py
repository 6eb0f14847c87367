"""The hub's ASGI routes: put `http_urlpatterns` ahead of Django in the host's HTTP
router, and `websocket_urlpatterns` in its WebSocket router (see project/asgi.py).

No middleware: the session of the project's own pages is read from its cookie only when
a request has no bearer token, in the same thread hop as the user's standing
(transports/credentials.py), not for every connect as Channels' cookie, session and auth
middleware would (each also holding a copy of the scope for the connection's life).
"""

from django.urls import path, re_path

from messenger_realtime.hub.negotiate import negotiate
from messenger_realtime.hub.transports.http import HubHttpConsumer
from messenger_realtime.hub.transports.websocket import HubConsumer

HUB_PATH = "hubs/messenger"

__all__ = ["HUB_PATH", "http_urlpatterns", "websocket_urlpatterns"]

http_urlpatterns = [
    # negotiate, with and without a trailing slash
    re_path(rf"^{HUB_PATH}/negotiate/?$", negotiate),  # type: ignore[arg-type]  # an ASGI app
    # Server-Sent Events, long polling, their sends and DELETE
    path(HUB_PATH, HubHttpConsumer.as_asgi()),
]

websocket_urlpatterns = [path(HUB_PATH, HubConsumer.as_asgi())]
