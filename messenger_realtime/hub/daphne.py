"""Daphne integration: polite Close on shutdown, no tokens in access logs, and the hub's
WebSocket protocol (wsprotocol.py: size limits with a Close, the send bound, the scheme).

Daphne stops on SIGTERM/SIGINT through Twisted's reactor; a "before shutdown" trigger
runs while sockets are still open, so every live connection gets
{"type":7,"allowReconnect":true} and the clients reconnect (to another process).

Browsers must put the access token in the WebSocket URL's query string, and Daphne's
access log prints HTTP request paths with their query; the scrubbing log generator
replaces such values with [redacted].
"""

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from messenger_realtime.hub import registry
from messenger_realtime.ops.logging import scrub_query_secrets

logger = logging.getLogger(__name__)


async def close_all_connections() -> int:
    connections = registry.live()
    await asyncio.gather(*(c.shutdown() for c in connections), return_exceptions=True)
    return len(connections)


async def _let_applications_finish(timeout: float) -> None:
    """Wait (bounded) until the application tasks Daphne cancels have unwound.

    Beyond tidiness: CPython before 3.11.8 can segfault when a coroutine still suspended
    in asyncio.Queue.get is destroyed during interpreter finalization (gh-113566).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (remaining := deadline - loop.time()) > 0:
        others = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        if not others:
            return
        await asyncio.wait(others, timeout=remaining)
    stragglers = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    for task in stragglers:
        task.cancel()
    if stragglers:
        await asyncio.wait(stragglers, timeout=1.0)


async def _shutdown(also_stop: Callable[[], Awaitable[None]] | None) -> None:
    registry.accepting = False  # clients told to reconnect must go to another process
    closed = await close_all_connections()
    if also_stop is not None:
        await also_stop()
    await _let_applications_finish(timeout=2.0)
    logger.info("hub shutdown", extra={"action": "shutdown", "closed": closed})


def install_daphne_integration(also_stop: Callable[[], Awaitable[None]] | None = None) -> None:
    """Call from the ASGI module when served by Daphne (Twisted's reactor is loaded).

    also_stop: awaited after the connections are closed and before Daphne exits (the
    in-process dispatcher's stop in single-process mode).
    """
    from twisted.internet import defer, reactor

    def before_shutdown() -> Any:
        return defer.Deferred.fromFuture(asyncio.ensure_future(_shutdown(also_stop)))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]
    _install_protocol()

    # Daphne's CLI imports the application before it builds its access log generator,
    # so replacing the class it will use here covers `daphne project.asgi:application`.
    cli = sys.modules.get("daphne.cli")
    if cli is not None:
        from daphne.access import AccessLogGenerator

        class ScrubbingAccessLogGenerator(AccessLogGenerator):  # type: ignore[misc]
            def write_entry(
                self, host: Any, date: Any, request: str, *args: Any, **kw: Any
            ) -> None:
                super().write_entry(host, date, scrub_query_secrets(request), *args, **kw)

        cli.AccessLogGenerator = ScrubbingAccessLogGenerator  # type: ignore[attr-defined]


def _install_protocol() -> None:
    """Serve WebSockets with HubWebSocketProtocol and HTTP with HubWebRequest; give a
    WebSocket's scope its `scheme`, and every scope the dict (HUB_STATE) through which
    the hub tells Daphne's protocol about the connection (binary frames, SSE's bound)."""
    from daphne import http_protocol
    from daphne.server import Server
    from daphne.ws_protocol import WebSocketFactory

    from messenger_realtime.hub.httpprotocol import HubWebRequest
    from messenger_realtime.hub.transports.websocket import HUB_SOCKET, HUB_STATE
    from messenger_realtime.hub.wsprotocol import HubWebSocketProtocol, scheme

    WebSocketFactory.protocol = HubWebSocketProtocol
    http_protocol.WebRequest = HubWebRequest  # HTTPFactory builds requests from this name
    if getattr(Server.create_application, "adds_scheme", False):
        return
    create_application = Server.create_application

    def with_scheme(server: Any, connection: Any, scope: dict[str, Any]) -> Any:
        if scope.get("type") == "websocket" and isinstance(connection, HubWebSocketProtocol):
            scope.setdefault("scheme", scheme(connection))
        if isinstance(connection, HubWebSocketProtocol | HubWebRequest):
            scope[HUB_STATE] = connection.hub_state = {}
        if isinstance(connection, HubWebSocketProtocol):
            scope[HUB_SOCKET] = connection  # frames go straight to it (websocket.py)
        return create_application(server, connection, scope)

    with_scheme.adds_scheme = True  # type: ignore[attr-defined]
    Server.create_application = with_scheme
