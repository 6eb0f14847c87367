"""The hub's ASGI routes, in front of the host's application. Hosts call
`messenger_realtime.asgi.with_hub`, which routes through `routed` here and also sets up
the server that serves it (messenger_realtime/asgi.py):

    application = with_hub(ProtocolTypeRouter({...the host's own routes...}))

`routed` makes the process's HubProcess (hub/process.py: the hub's shared state, one per
served application) and hands it to each hub route. It answers the hub's paths under the
server's root path: the WebSocket at /hubs/messenger, POST (and OPTIONS)
/hubs/messenger/negotiate, and the HTTP transports (Server-Sent Events, long polling,
their sends and DELETE) at /hubs/messenger; every other request goes to the host's
application unchanged.

A hub route is dispatched without a frame of its own: `routed` returns the hub's
coroutine itself rather than awaiting it. A WebSocket is held for hours, and Channels'
ProtocolTypeRouter and URLRouter each await the next application, so each keeps a
suspended frame alive for the connection's life, and URLRouter a copy of the scope
(with every header) besides: ~1.5 KB of every idle connection, and a path resolution
through Django's URL patterns on every connect (docs/performance.md).

No middleware: the session of the project's own pages is read from its cookie only when
a request has no bearer token, in the same thread hop as the user's standing
(credentials/request.py), not for every connect as Channels' cookie, session and auth
middleware would (each also holding a copy of the scope for the connection's life).
"""

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import markcoroutinefunction

from messenger_realtime.hub.negotiate import negotiate
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.transports.http import HubHttpConsumer
from messenger_realtime.hub.transports.websocket import HubConsumer

HUB_PATH = "hubs/messenger"
NEGOTIATE_PATH = re.compile(rf"{HUB_PATH}/negotiate/?")  # with or without the slash

__all__ = ["HUB_PATH", "routed"]

Application = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def hub_route(scope: dict[str, Any], hub: HubProcess) -> Application | None:
    """The hub's application for this request (serving `hub`), None when the path is
    not the hub's."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root:
        if not path.startswith(root):
            return None
        path = path[len(root) :]
    path = path.lstrip("/")
    kind = scope["type"]
    if path == HUB_PATH:
        if kind == "websocket":
            return HubConsumer(hub)
        if kind == "http":
            return HubHttpConsumer(hub)
    elif kind == "http" and NEGOTIATE_PATH.fullmatch(path):
        return functools.partial(negotiate, hub)
    return None


def routed(application: Application, hub: HubProcess | None = None) -> Application:
    """`application` with the hub's routes in front of it (see the module's docstring),
    serving `hub` (a new HubProcess when None)."""
    process = HubProcess() if hub is None else hub

    def route(scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None]:
        served = hub_route(scope, process)
        # The coroutine itself, not awaited here: no frame of this function outlives the
        # call (ASGI servers run what an application returns, as a task).
        return (served or application)(scope, receive, send)

    # An ASGI 3 application although not a coroutine function: asgiref's test, which
    # Daphne applies, and the coroutine-function test Uvicorn's interface detection
    # applies, would otherwise take it for an ASGI 2 double callable.
    route._asgi_single_callable = True  # type: ignore[attr-defined]
    return markcoroutinefunction(route)
