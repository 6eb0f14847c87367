"""Single-process mode (REALTIME_BACKPLANE_ENABLED=false): the dispatcher inside Daphne.

The in-memory channel layer cannot leave its process, so the worker runs on Daphne's
own event loop instead of as a process of its own. project/asgi.py starts it and hands
its stop() to the hub's shutdown sequence (hub/daphne/server.py).

This mode is one process by definition. Finding the dispatch lock held by another
process is therefore a contradiction in the configuration (several hub processes, or a
worker, without the Redis backplane): the leader's pushes never leave its own process,
so this process's clients would get nothing. It says so (an ERROR naming the setting)
and answers 503 on /health/ready until it leads, so an orchestrator stops routing clients
to it, instead of standing by in silence. (A crashed run's session may hold the lock for
a while after a restart; the standby then takes the stale lease over and is ready.)
"""

import asyncio

from channels.layers import get_channel_layer

from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.conf.settings import load_options
from messenger_realtime.dispatch.runner import build_runner
from messenger_realtime.ops import webhealth
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)

ANOTHER_LEADER = (
    "REALTIME_BACKPLANE_ENABLED is false (one process dispatches inside Daphne), but "
    "another process holds the dispatch lock: several hub processes or a worker run "
    "without the Redis backplane, and this process's clients would get no events. "
    "Enable the backplane, or run one Daphne process. (Right after a restart, the "
    "previous run's session may still hold it: then this clears once this process "
    "takes the lease over.)"
)


class InProcessDispatcher:
    """A Dispatcher started once Twisted's reactor runs, stopped before Daphne exits."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        publisher = ChannelLayerPublisher(get_channel_layer())
        self.dispatcher = build_runner(load_options(), publisher, on_lock_busy=self._not_alone)
        self.task: asyncio.Task[None] | None = None
        reactor.callWhenRunning(self._start)

    def _start(self) -> None:
        self.task = asyncio.ensure_future(self.dispatcher.run())
        logger.info("dispatcher running inside Daphne", extra={"action": "in_process"})

    def _not_alone(self) -> None:
        """The lock is busy: another process dispatches (see the module's docstring)."""
        if not webhealth.refused("dispatch"):
            logger.error(ANOTHER_LEADER, extra={"action": "contradiction"})
        webhealth.refuse("dispatch", ANOTHER_LEADER, lambda: self.dispatcher.liveness.leading)

    async def stop(self) -> None:
        """Stop between rows; the dispatcher records outcomes and releases its lock."""
        self.dispatcher.stop.set()
        if self.task is not None:
            await self.task


def start_if_single_process() -> InProcessDispatcher | None:
    """The in-process dispatcher when the backplane is off, else None (a worker runs)."""
    return None if load_options().realtime_backplane_enabled else InProcessDispatcher()
