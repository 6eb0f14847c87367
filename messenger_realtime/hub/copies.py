"""A user's copy in a chat's layer group, and when a hub process takes it out (fanout.py).

The worker's join copies the members of the user's group into the chat's group
(backplane/pipeline.copy_members), so a process's `<process>!user.<id>` channel receives
the chat's events before its connections have read their memberships. Once every local
connection of that user is in the chat's group here, the copy is redundant (the event
now comes through both names) and is taken out of the chat's group; when the user turns
out not to be a member, the connection that found out takes it out (forget). The
reader looks at a message's copies only after it has handed the message to every inbox,
and a failure here is logged, never a lost delivery (fanout.route).
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any
from uuid import UUID

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.hub.inbox import Inbox


class Copies:
    def __init__(self, layer: Any, channel_of: Callable[[str], str]) -> None:
        self.layer = layer
        self.channel_of = channel_of
        self._forgetting: set[tuple[str, str]] = set()  # (chat group, user group) in flight
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    async def forget(self, chat_group: str, user_group: str) -> None:
        """Stop receiving the chat's events through the user's channel."""
        with contextlib.suppress(Exception):  # Redis may be unreachable: groups expire
            await self.layer.group_discard(chat_group, self.channel_of(user_group))

    def drop_redundant(
        self, groups: list[str], message: dict[str, Any], members: dict[str, set[Inbox]]
    ) -> None:
        """A chat event that came both through the chat's channel and a user's: once all
        of that user's local connections are in the chat's group, drop the copy."""
        chat = message.get("chat")
        if chat is None:
            return
        chat_group = layer_group(HubTarget.chat(UUID(chat)))
        if chat_group not in groups:
            return
        in_chat = members.get(chat_group, set())
        for group in groups:
            pair = (chat_group, group)
            if group == chat_group or pair in self._forgetting:
                continue
            if members.get(group, set()) <= in_chat:
                self._forgetting.add(pair)
                self._tasks[pair] = asyncio.create_task(self._forget_once(*pair))

    def cancel(self) -> None:
        """The process left every group: nothing is left to take out."""
        for task in list(self._tasks.values()):
            task.cancel()

    async def _forget_once(self, chat_group: str, user_group: str) -> None:
        try:
            await self.forget(chat_group, user_group)
        finally:
            self._forgetting.discard((chat_group, user_group))
            self._tasks.pop((chat_group, user_group), None)
