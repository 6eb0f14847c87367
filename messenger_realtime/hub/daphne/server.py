"""Daphne integration: polite Close on shutdown, no tokens in access logs, the hub's
protocols (daphne/websocket_protocol.py, daphne/web_request.py) and Daphne's server
patched to serve them, each connection's scope given its ServerControls
(daphne/controls.py). All of it is installed by hub/daphne/__init__.py (install), one
call the app makes itself.

Daphne stops on SIGTERM/SIGINT through Twisted's reactor; a "before shutdown" trigger
runs while sockets are still open, so every live connection gets
{"type":7,"allowReconnect":true} and the clients reconnect (to another process).

Daphne's listening sockets and the process's collector are set for a reconnect storm
(daphne/capacity.py).

Browsers must put the access token in the WebSocket URL's query string, and Daphne's
access log prints HTTP request paths with their query; the scrubbing log generator
replaces such values with [redacted].

Per connection, Daphne's server looks at every connection every second (its application
checker: has the application ended, has the socket gone) and every two seconds (its
timeout checker), and Autobahn formats a debug dump of forty settings for every socket
it opens, logged or not. With thousands of idle connections that was a fifth of what an
idle hub process spent. Here the application checker visits only the connections with
something to settle (an application that ended, a socket that went: both reported by
callbacks), the timeout checker visits open hub WebSockets once a minute (their only
timeout is Daphne's --websocket_timeout, a day by default) and everything else as
Daphne does, and the debug dump is formatted only if it is logged. Every
FULL_SCAN_EVERY runs, both still visit every connection, as a safety net.
"""

import asyncio
import collections
import functools
import logging
import pprint
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import messenger_realtime.hub.connection.ending as ending
import messenger_realtime.hub.daphne.capacity as capacity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.ops.logging import get_logger, scrub_query_secrets

logger = get_logger(__name__)
daphne_logger = logging.getLogger("daphne.server")  # its messages, under its own name
FULL_SCAN_EVERY = 30  # runs of a checker between two visits of every connection


async def close_all_connections(hub: HubProcess) -> int:
    connections = hub.live()
    ends = (c.end(ending.SHUTDOWN) for c in connections)
    await asyncio.gather(*ends, return_exceptions=True)
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


async def _shutdown(hub: HubProcess, also_stop: Callable[[], Awaitable[None]] | None) -> None:
    hub.accepting = False  # clients told to reconnect must go to another process
    closed = await close_all_connections(hub)
    if also_stop is not None:
        await also_stop()
    await _let_applications_finish(timeout=2.0)
    logger.info("hub shutdown", extra={"action": "shutdown", "closed": closed})


def close_connections_at_shutdown(
    hub: HubProcess, also_stop: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Twisted's reactor, before it shuts down: `hub` refuses new connections and closes
    its own (a Close with allowReconnect each).

    also_stop: awaited after the connections are closed and before Daphne exits (the
    in-process dispatcher's stop in single-process mode).
    """
    from twisted.internet import defer, reactor

    def before_shutdown() -> Any:
        return defer.Deferred.fromFuture(asyncio.ensure_future(_shutdown(hub, also_stop)))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]


def scrub_access_logs() -> None:
    """Daphne's access log (its CLI) and `runserver`'s print request paths with their
    query: tokens there become [redacted]."""
    _scrub_runserver_log()
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


def _scrub_runserver_log() -> None:
    """`manage.py runserver` from Daphne's Django app logs each request's path with its
    query string: the same scrubbing there."""
    runserver = sys.modules.get("daphne.management.commands.runserver")
    command = getattr(runserver, "Command", None)
    if command is None or getattr(command, "hub_scrubbed", False):
        return
    log_action = command.log_action

    def scrubbed(self: Any, protocol: str, action: str, details: dict[str, Any]) -> None:
        if "path" in details:
            details = {**details, "path": scrub_query_secrets(str(details["path"]))}
        log_action(self, protocol, action, details)

    command.log_action = scrubbed
    command.hub_scrubbed = True


def install_protocols() -> None:
    """Serve WebSockets with HubWebSocketProtocol (with the process's FrameDeflater, for
    the connections that negotiate permessage-deflate) and HTTP with HubWebRequest."""
    from daphne import http_protocol
    from daphne.ws_protocol import WebSocketFactory

    from messenger_realtime.hub.daphne.deflate import FrameDeflater
    from messenger_realtime.hub.daphne.web_request import HubWebRequest
    from messenger_realtime.hub.daphne.websocket_protocol import HubWebSocketProtocol

    HubWebSocketProtocol.deflater = FrameDeflater()
    WebSocketFactory.protocol = HubWebSocketProtocol
    http_protocol.WebRequest = HubWebRequest  # HTTPFactory builds requests from this name


def install_server() -> None:
    """Daphne's server makes each application with a lighter input queue, gives a
    WebSocket's scope its `scheme` and every hub scope its ServerControls (controls.py);
    its two checkers visit only the connections that need them (above); it listens with
    the storm's backlog (capacity.py)."""
    from daphne.server import Server

    if getattr(Server, "hub_integrated", False):
        return
    Server.hub_integrated = True
    _install_server(Server)


def format_debug_lazily() -> None:
    """Autobahn's per-socket debug dump of its settings, formatted only if logged."""
    from autobahn.websocket import protocol as autobahn_protocol

    autobahn_protocol.pformat = LazyFormat  # type: ignore[assignment,attr-defined]


class LazyFormat:
    """pprint.pformat(value), computed only when a log line is written."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return pprint.pformat(self.value)


class InputQueue:
    """An application's input (what Daphne's protocol puts, what `receive` takes): one
    reader, almost always empty. Daphne's asyncio.Queue held three deques and an Event
    per connection (about 2.5 KB of an idle connection's memory); this holds a deque
    only while something waits in it, and a future only while the reader waits.

    Backpressure: with a `producer` (a WebSocket's protocol), once HIGH messages wait the
    socket is no longer read (Twisted's pauseProducing: the kernel's buffers fill and TCP
    holds the client back), and it is read again once the application has worked them
    down to LOW (unless the hub stopped reading it for good: a flood). Without it a
    client writing faster than the hub works had its messages read into memory as fast
    as they came (+389 MB in 3 s, issue 56)."""

    __slots__ = ("_items", "_paused", "_producer", "_waiter")

    HIGH = 8  # messages waiting (each at most the frame limit) before the socket pauses
    LOW = 2  # ... and when it is read again

    def __init__(self, producer: Any = None) -> None:
        self._items: collections.deque[Any] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._producer = producer
        self._paused = False

    def put_nowait(self, item: Any) -> None:
        items = self._items
        if items is None:
            items = self._items = collections.deque()
        items.append(item)
        if len(items) >= self.HIGH and self._producer is not None and not self._paused:
            self._paused = True
            self._producer.pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        items = self._items
        item = items.popleft()
        if self._paused and len(items) <= self.LOW:
            self._paused = False
            self._producer.resume_reading()
        if not items:
            self._items = None
        return item

    @property
    def paused(self) -> bool:
        return self._paused


class Settling:
    """The connections Daphne's application checker has work on, and its runs."""

    def __init__(self) -> None:
        self.protocols: set[Any] = set()
        self.application_runs = 0
        self.timeout_runs = 0


def _install_server(server_class: Any) -> None:
    """Daphne's server: its application factory and its two periodic checkers."""
    from twisted.internet import reactor

    from messenger_realtime.hub.daphne.controls import DaphneSocket, DaphneStream
    from messenger_realtime.hub.daphne.web_request import HubWebRequest
    from messenger_realtime.hub.daphne.websocket_protocol import HubWebSocketProtocol, scheme
    from messenger_realtime.hub.transports.server import attach

    call_later: Any = reactor.callLater
    settling = Settling()
    protocol_disconnected = server_class.protocol_disconnected

    def create_application(server: Any, protocol: Any, scope: dict[str, Any]) -> Any:
        """Daphne 4.2's (daphne/server.py), with an InputQueue, the hub's controls on
        the scope, and the checker told when the application ends."""
        if isinstance(protocol, HubWebSocketProtocol):
            if scope.get("type") == "websocket":
                scope.setdefault("scheme", scheme(protocol))
            attach(scope, DaphneSocket(protocol))  # frames go straight to it
        elif isinstance(protocol, HubWebRequest):
            attach(scope, DaphneStream(protocol))  # an event stream's send bound
        assert "application_instance" not in server.connections[protocol]
        # A WebSocket's frames are read as the application takes them (InputQueue);
        # an HTTP request's body has been read whole already, within Daphne's limit.
        websocket = isinstance(protocol, HubWebSocketProtocol)
        input_queue = InputQueue(protocol if websocket else None)
        scope.setdefault("asgi", {"version": "3.0"})
        application = server.application(
            scope=scope,
            receive=input_queue.get,
            send=functools.partial(server.handle_reply, protocol),
        )
        if protocol not in server.connections:
            return None
        instance = asyncio.ensure_future(application)
        server.connections[protocol]["application_instance"] = instance
        instance.add_done_callback(lambda _: settling.protocols.add(protocol))
        return input_queue

    def watched_protocol_disconnected(server: Any, protocol: Any) -> None:
        protocol_disconnected(server, protocol)
        settling.protocols.add(protocol)

    def application_checker(server: Any) -> None:
        settling.application_runs += 1
        if settling.application_runs % FULL_SCAN_EVERY == 0:
            visit = list(server.connections)
        else:
            visit = list(settling.protocols)
        settling.protocols.clear()
        for protocol in visit:
            details = server.connections.get(protocol)
            if details is not None and _settle(server, protocol, details):
                settling.protocols.add(protocol)  # disconnected, its application not done
        call_later(1, server.application_checker)

    def timeout_checker(server: Any) -> None:
        settling.timeout_runs += 1
        everything = settling.timeout_runs % FULL_SCAN_EVERY == 0
        for protocol in list(server.connections):
            if (
                everything
                or not isinstance(protocol, HubWebSocketProtocol)
                or protocol.state != protocol.STATE_OPEN
            ):
                protocol.check_timeouts()
        call_later(2, server.timeout_checker)

    capacity.listen_with_backlog(server_class)
    server_class.create_application = create_application
    server_class.protocol_disconnected = watched_protocol_disconnected
    server_class.application_checker = application_checker
    server_class.timeout_checker = timeout_checker


def _settle(server: Any, protocol: Any, details: dict[str, Any]) -> bool:
    """Daphne 4.2's application checker for one connection (daphne/server.py, pinned in
    requirements.txt): cancel an application that outlives its socket by
    application_close_timeout, reap an ended one (logging its exception), forget the
    connection once both are gone. True while it still needs a look (its socket went,
    its application runs on)."""
    disconnected = details.get("disconnected")
    application_instance = details.get("application_instance")
    if (
        disconnected
        and time.time() - disconnected > server.application_close_timeout
        and application_instance
        and not application_instance.done()
    ):
        daphne_logger.warning(
            "Application instance %r for connection %s took too long to shut down and was killed.",
            application_instance,
            repr(protocol),
        )
        application_instance.cancel()
    if application_instance and application_instance.done():
        try:
            exception = application_instance.exception()
        except asyncio.CancelledError:
            pass
        else:
            if exception:
                if isinstance(exception, KeyboardInterrupt):
                    server.stop()  # the protocol asks the server to exit (tests)
                else:
                    daphne_logger.error(
                        "Exception inside application: %s", exception, exc_info=exception
                    )
                    if not disconnected:
                        protocol.handle_exception(exception)
        del details["application_instance"]
        application_instance = None
    if not application_instance and disconnected:
        del server.connections[protocol]
        return False
    return bool(disconnected)
