"""Daphne integration: polite Close on shutdown, and no tokens in access logs.

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
from typing import Any

from channels.layers import get_channel_layer

from messenger_realtime.conf.settings import load_options
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.hub.consumer import LIVE_CONNECTIONS, HubConsumer
from messenger_realtime.ops.logging import scrub_query_secrets
from messenger_realtime.transport.publisher import ChannelLayerPublisher

logger = logging.getLogger(__name__)


class _InProcessDispatcher:
    """Single-process mode (REALTIME_BACKPLANE_ENABLED=false): the in-memory channel
    layer cannot leave this process, so the dispatcher runs here, on Daphne's loop."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        self.dispatcher = Dispatcher(load_options(), ChannelLayerPublisher(get_channel_layer()))
        self.task: asyncio.Task[None] | None = None
        reactor.callWhenRunning(self._start)

    def _start(self) -> None:
        self.task = asyncio.ensure_future(self.dispatcher.run())
        logger.info("dispatcher running inside Daphne", extra={"action": "in_process"})

    async def stop(self) -> None:
        """Stop between rows; the dispatcher records outcomes and releases its lock."""
        self.dispatcher.stop.set()
        if self.task is not None:
            await self.task


async def close_all_connections() -> int:
    connections = list(LIVE_CONNECTIONS)
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


async def _shutdown(in_process: _InProcessDispatcher | None) -> None:
    HubConsumer.accepting = False  # clients told to reconnect must go to another process
    closed = await close_all_connections()
    if in_process is not None:
        await in_process.stop()
    await _let_applications_finish(timeout=2.0)
    logger.info("hub shutdown", extra={"action": "shutdown", "closed": closed})


def install_daphne_integration() -> None:
    """Call from the ASGI module when served by Daphne (Twisted's reactor is loaded)."""
    from twisted.internet import defer, reactor

    in_process = None if load_options().realtime_backplane_enabled else _InProcessDispatcher()

    def before_shutdown() -> Any:
        return defer.Deferred.fromFuture(asyncio.ensure_future(_shutdown(in_process)))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]

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
