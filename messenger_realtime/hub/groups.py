"""A connection's layer groups: its user group and the chats the domain says it holds.
A mixin of HubConnection; the membership rules themselves are in membership.py."""

import contextlib
from collections.abc import Collection
from typing import Any
from uuid import UUID

from channels.db import database_sync_to_async

from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.hub.membership import ChatMemberships, Verdict
from messenger_realtime.transport.groups import layer_group


class ConnectionGroups:
    user_id: UUID
    handshaken: bool
    channel_layer: Any
    channel_name: str
    memberships: ChatMemberships
    ended: bool

    @property
    def chats(self) -> frozenset[UUID]:
        return self.memberships.ids

    async def _deliverable(self, chat: str, version: int | None) -> bool:
        """Whether a chat event (of `chat`, read at membership `version`) may go out: a
        dict lookup, or one domain read when the event is newer than what this
        connection read its memberships at."""
        verdict = self.memberships.verdict(chat, version)
        if verdict is Verdict.RESYNC:
            await self._sync_groups()
            verdict = self.memberships.settle(chat, version)
            if chat not in self.memberships.held:
                # A stale layer group, or a join the domain undid since: stop getting these.
                group = layer_group(HubTarget.chat(UUID(chat)))
                await self.channel_layer.group_discard(group, self.channel_name)
        return verdict is Verdict.FORWARD

    async def _sync_groups(self) -> None:
        """Rebuild the chat groups from the domain (and join the user group at first)."""
        if not self.handshaken:
            await self.channel_layer.group_add(
                layer_group(HubTarget.user(self.user_id)), self.channel_name
            )
        current = await database_sync_to_async(get_domain_port().active_chats)(self.user_id)
        # Stop forwarding a left chat before anything else.
        left, joined = self.memberships.update(current)
        for chat_id in left:
            await self.channel_layer.group_discard(
                layer_group(HubTarget.chat(chat_id)), self.channel_name
            )
        for chat_id in joined:
            await self.channel_layer.group_add(
                layer_group(HubTarget.chat(chat_id)), self.channel_name
            )
        if self.ended:  # it ended while this ran: leave what it may just have joined
            await self.leave_groups()

    async def refresh_groups(self) -> None:
        """Join every group again: channels-redis forgets members older than its
        group_expiry (a day), which would silently cut a long-lived connection off."""
        for group in self._layer_groups(self.chats):
            await self.channel_layer.group_add(group, self.channel_name)

    async def leave_groups(self) -> None:
        """Leave every group (whether or not the handshake finished) and drop what the
        layer holds in memory for this channel: nothing reads it any more."""
        with contextlib.suppress(Exception):  # Redis may be unreachable: groups expire
            for group in self._layer_groups(self.chats):
                await self.channel_layer.group_discard(group, self.channel_name)
        buffers = getattr(self.channel_layer, "receive_buffer", None)
        if buffers is not None:
            buffers.pop(self.channel_name, None)

    def _layer_groups(self, chats: Collection[UUID]) -> list[str]:
        targets = [HubTarget.user(self.user_id), *(HubTarget.chat(c) for c in chats)]
        return [layer_group(t) for t in targets]
