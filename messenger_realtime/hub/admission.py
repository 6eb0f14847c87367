"""Admission control: how many connects one hub process has in progress, and when to shed.

A connect is in progress from the start of its negotiate until that request answers,
and from its WebSocket upgrade (or first long-polling / event-stream request) until its
handshake is answered or the connection ends. After a deploy or a crash every client
reconnects at once; a process that took them all would queue their handshakes past the
clients' 15 s handshake timeout, so each retry would add to the pile and the storm might
never converge. Past ADMISSION_LIMIT connects in progress, negotiate answers 503 with
Retry-After straight away instead (negotiate.py): cheap for the process, and the
official clients retry it like any failed start (the JavaScript client's reconnect
policy: 0, 2, 10 and 30 s), by when the process has worked through its queue.

Shedding is counted (messenger_realtime_hub_connects_shed_total) and logged at most once
per SHED_LOG_EVERY seconds with how many were shed since the last line, so a storm does
not become a flood of log lines.
"""

import contextlib
import logging
import time
from collections.abc import Iterator

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.ops import metrics

logger = logging.getLogger(__name__)
RETRY_AFTER = 2  # seconds (Retry-After is whole seconds): about a storm's queue at 300/s
SHED_LOG_EVERY = 1.0  # seconds between two "connects shed" log lines at most


class Admission:
    """This process's count of connects in progress, and its shedding log."""

    def __init__(self) -> None:
        self.in_progress = 0
        self._shed_unlogged = 0
        self._logged_at = float("-inf")

    @contextlib.contextmanager
    def connect(self, options: HubOptions) -> Iterator[bool]:
        """Count a negotiate for as long as it runs; yields False (and counts nothing)
        when ADMISSION_LIMIT connects are already in progress."""
        if self.in_progress >= options.admission_limit:
            self._shed(options)
            yield False
            return
        self.in_progress += 1
        try:
            yield True
        finally:
            self.in_progress -= 1

    def opening(self) -> "Opening":
        """Count a transport's connect until its handshake is answered (or it ends)."""
        self.in_progress += 1
        return Opening(self)

    def _shed(self, options: HubOptions) -> None:
        metrics.hub_connects_shed.inc()
        self._shed_unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= SHED_LOG_EVERY:
            logger.warning(
                "hub connects shed",
                extra={
                    "action": "shed",
                    "shed": self._shed_unlogged,
                    "in_progress": self.in_progress,
                    "limit": options.admission_limit,
                },
            )
            self._shed_unlogged, self._logged_at = 0, now


class Opening:
    """One transport's connect in progress; done() once, whichever way it ends."""

    __slots__ = ("_admission",)

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission

    def done(self) -> None:
        if self._admission is not None:
            self._admission.in_progress -= 1
            self._admission = None


ADMISSION = Admission()  # the process's one count (Daphne runs one event loop)


def connect(options: HubOptions) -> contextlib.AbstractContextManager[bool]:
    return ADMISSION.connect(options)


def opening() -> Opening:
    return ADMISSION.opening()
