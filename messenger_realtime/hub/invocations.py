"""Client-to-server hub messages: invocations of the hub's methods and their completions.

A mixin of HubConnection, kept apart so the connection stays about its lifecycle.
Wording of errors follows ASP.NET Core SignalR, which clients may show or match.
"""

import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.protocols.base import Frame, HubProtocol, MessageType

logger = logging.getLogger(__name__)


class HubInvocations:
    user_id: UUID
    protocol: HubProtocol | None
    options: HubOptions
    refused_invocations = 0  # invocations refused for the rate limit, on this connection

    if TYPE_CHECKING:  # provided by HubConnection and its mixins

        @property
        def chats(self) -> frozenset[UUID]: ...

        async def _client_closed(self) -> None: ...

        async def _emit(self, frame: Frame) -> None: ...

        async def _close_with_error(
            self, reason: str, *, allow_reconnect: bool = False
        ) -> None: ...

    async def _handle(self, message: dict[str, Any]) -> bool:
        """Act on one message; False when the connection was closed."""
        kind = message["type"]
        if kind == MessageType.CLOSE:
            await self._client_closed()
            return False
        if kind == MessageType.INVOCATION:
            await self._invoke(message)
        elif kind == MessageType.STREAM_INVOCATION:
            await self._reply(
                message,
                error=f"The client attempted to invoke the non-streaming '{message['target']}' "
                "method with a streaming invocation.",
            )
        # Ping, CancelInvocation, Ack, Sequence, Completions for invocations this hub never
        # makes, and unknown types (as ASP.NET) need no answer.
        return True

    async def _invoke(self, message: dict[str, Any]) -> None:
        target, arguments = message["target"], message.get("arguments", [])
        refusal = await ratelimit.acheck(ratelimit.INVOCATIONS, self.user_id, self.options)
        if refusal is not None:
            self.refused_invocations += 1
            if self.refused_invocations >= self.options.rate_limit_flood:
                # It keeps going past its limit: end it (a reconnect counts on, too).
                await self._close_with_error(f"Connection closed with an error. {refusal}")
                return
            await self._reply(message, error=f"{_failed(target)} HubException: {refusal}")
            return
        method = self.hub_methods.get(target)
        if method is None:
            await self._reply(
                message, error=f"{_failed(target)} HubException: Method does not exist."
            )
            return
        if arguments:
            await self._reply(
                message,
                error=f"{_failed(target)} InvalidDataException: Invocation provides "
                f"{len(arguments)} argument(s) but target expects 0.",
            )
            return
        try:
            result = await method(self)
        except Exception:
            logger.exception("hub method failed", extra={"action": "invoke", "target": target})
            await self._reply(
                message, error=f"An unexpected error occurred invoking '{target}' on the server."
            )
            return
        await self._reply(message, result=result)

    async def _reply(
        self, message: dict[str, Any], *, result: Any = None, error: str | None = None
    ) -> None:
        """Exactly one Completion for an invocation with an id; none without one."""
        invocation_id = message.get("invocationId")
        if invocation_id is not None:
            assert self.protocol is not None
            await self._emit(self.protocol.completion(invocation_id, result=result, error=error))

    # -- hub methods clients may call -----------------------------------------------

    async def get_groups(self) -> list[str]:
        """The hub groups this connection is in (decided by the server)."""
        chats = sorted(str(HubTarget.chat(c)) for c in self.chats)
        return [str(HubTarget.user(self.user_id)), *chats]

    hub_methods = {"GetGroups": get_groups}


def _failed(target: str) -> str:
    return f"Failed to invoke '{target}' due to an error on the server."
