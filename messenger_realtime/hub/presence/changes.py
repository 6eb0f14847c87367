"""A user's presence changed: the message their watchers' processes get.

It goes to the channel-layer group `presence.<user>` (backplane/group_names.py), which a hub
process joins while one of its connections watches that user: a change reaches only
those processes, one message each, whatever the user's chats and contacts. Each process
hands it to its connections watching the user (hub/fanout.py routes it like an event),
which forward it as a `presence` event.

Changes go out in batches (`announce_many`: one round trip reads every changed user's
watcher group, most of them empty, and one more reaches the watching processes): a
process's connects and disconnects through its `Announcer`, which gathers what changes
within ANNOUNCE_WINDOW, and a sweep's finds at once. A connect storm then costs a round
trip per window, not one or two per connect.
"""

import asyncio
import time
from typing import Any
from uuid import UUID

from messenger_realtime.backplane import pipeline
from messenger_realtime.backplane.group_names import presence_group
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
PRESENCE_MESSAGE = "realtime.presence"  # the Channels message type
PRESENCE_EVENT = "presence"  # what a watching client receives (docs/hub.md, "Presence")


def change(user_id: UUID, online: bool, last_seen: float | None) -> dict[str, Any]:
    """The Channels message of a change (and its `presence` event's payload)."""
    return {
        "type": PRESENCE_MESSAGE,
        "payload": {"userId": str(user_id), "online": online, "lastSeen": last_seen},
    }


ANNOUNCE_WINDOW = 0.01  # s: a process's changes gathered into one batch


Change = tuple[UUID, bool, float | None]  # user, online, last seen


async def announce_many(layer: Any, changes: list[Change], clock: pipeline.ScoreClock) -> None:
    """Tell each changed user's watchers, in order. A batch that cannot be sent (Redis
    unreachable) is logged, not retried: the watchers' clients read the state again
    when they reconnect."""
    messages = [
        (
            presence_group(user_id),
            change(user_id, online, last_seen if online or last_seen else float(int(time.time()))),
        )
        for user_id, online, last_seen in changes
    ]
    try:
        if pipeline.supports(layer):
            pipeline.report_lost((await pipeline.group_send_many(layer, messages, clock)).lost)
        else:
            for group, message in messages:
                await layer.group_send(group, message)
    except Exception as exc:
        logger.warning(
            "presence changes not announced",
            extra={
                "action": "presence",
                "changes": len(messages),
                Field.ERROR_CODE: describe_error(exc),
            },
        )


class Announcer:
    """One process's (one event loop's) changes, gathered for ANNOUNCE_WINDOW and sent in
    one batch (HubProcess.take_place, give_back_place)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.waiting: list[Change] = []
        self.clock = pipeline.ScoreClock()
        self.sending: asyncio.Task[None] | None = None

    def announce(self, user_id: UUID, online: bool, last_seen: float | None = None) -> None:
        self.waiting.append((user_id, online, last_seen))
        if self.sending is None:
            self.sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        await asyncio.sleep(ANNOUNCE_WINDOW)  # a batching window, not synchronisation
        batch, self.waiting, self.sending = self.waiting, [], None
        await announce_many(self.layer, batch, self.clock)
