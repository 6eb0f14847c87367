"""URL routes of the hub: include these in the host's URLconf and ASGI router."""

from django.urls import path, re_path

from messenger_realtime.hub.negotiate import negotiate
from messenger_realtime.hub.transports.http import HubHttpConsumer
from messenger_realtime.hub.transports.websocket import HubConsumer

HUB_PATH = "hubs/messenger"

# HTTP (Django): negotiate, with and without a trailing slash.
urlpatterns = [re_path(rf"^{HUB_PATH}/negotiate/?$", negotiate, name="hub-negotiate")]


# HTTP (ASGI, routed to HUB_PATH ahead of Django: see project/asgi.py): Server-Sent
# Events, long polling, their sends and DELETE.
__all__ = ["HUB_PATH", "HubConsumer", "HubHttpConsumer", "urlpatterns", "websocket_urlpatterns"]

# WebSocket: the hub itself.
websocket_urlpatterns = [path(HUB_PATH, HubConsumer.as_asgi())]
