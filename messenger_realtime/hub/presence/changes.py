"""A user's presence changed: the message their watchers' processes get.

It goes to the channel-layer group `presence.<user>` (backplane/group_names.py), which a hub
process joins while one of its connections watches that user: a change reaches only
those processes, one message each, whatever the user's chats and contacts. Each process
hands it to its connections watching the user (hub/fanout.py routes it like an event),
which forward it as a `presence` event.
"""

import logging
import time
from typing import Any
from uuid import UUID

from messenger_realtime.backplane.group_names import presence_group
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
PRESENCE_MESSAGE = "realtime.presence"  # the Channels message type
PRESENCE_EVENT = "presence"  # what a watching client receives (docs/hub.md, "Presence")


def change(user_id: UUID, online: bool, last_seen: float | None) -> dict[str, Any]:
    """The Channels message of a change (and its `presence` event's payload)."""
    return {
        "type": PRESENCE_MESSAGE,
        "payload": {"userId": str(user_id), "online": online, "lastSeen": last_seen},
    }


async def announce(layer: Any, user_id: UUID, online: bool, last_seen: float | None = None) -> None:
    """Tell the user's watchers. A change that cannot be sent (Redis unreachable) is
    logged, not retried: the watchers' clients read the state again when they reconnect."""
    if not online and last_seen is None:
        last_seen = float(int(time.time()))
    try:
        await layer.group_send(presence_group(user_id), change(user_id, online, last_seen))
    except Exception as exc:
        logger.warning(
            "presence change not announced",
            extra={
                "action": "presence",
                Field.USER_ID: user_id,
                Field.ERROR_CODE: describe_error(exc),
            },
        )
