"""Single-process mode (REALTIME_BACKPLANE_ENABLED=false): the dispatcher inside Daphne.

The in-memory channel layer cannot leave its process, so the worker runs on Daphne's
own event loop instead of as a process of its own. project/asgi.py starts it and hands
its stop() to the hub's shutdown sequence (hub/daphne.py).
"""

import asyncio
import logging

from channels.layers import get_channel_layer

from messenger_realtime.conf.settings import load_options
from messenger_realtime.dispatch.partitioned import build_runner
from messenger_realtime.transport.publisher import ChannelLayerPublisher

logger = logging.getLogger(__name__)


class InProcessDispatcher:
    """A Dispatcher started once Twisted's reactor runs, stopped before Daphne exits."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        publisher = ChannelLayerPublisher(get_channel_layer())
        self.dispatcher = build_runner(load_options(), publisher)
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


def start_if_single_process() -> InProcessDispatcher | None:
    """The in-process dispatcher when the backplane is off, else None (a worker runs)."""
    return None if load_options().realtime_backplane_enabled else InProcessDispatcher()
