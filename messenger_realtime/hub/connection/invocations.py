"""Client-to-server hub messages: invocations of the hub's methods and their completions.

A part of HubConnection (`invocations`) whose one piece of state is its own: how many
invocations the rate limit refused (past RATE_LIMIT_FLOOD the connection is ended). A
method declared `charged=False` (methods/) is not charged to that limit. The
connection is passed to `handle` with each message, never kept. Wording of errors
follows ASP.NET Core SignalR, which clients may show or match.
"""

import logging
from typing import Any

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.exceptions import HubError
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection.methods import HubMethod, discover
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.protocols.base import MessageType

logger = logging.getLogger(__name__)


class Invocations:
    """What a connection's client invokes: answered here, counted when refused."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused = 0  # invocations the rate limit refused on this connection

    async def handle(self, connection: Connection, message: dict[str, Any]) -> bool:
        """Act on one message from the client; False when the connection was closed."""
        kind = message["type"]
        if kind == MessageType.CLOSE:
            await connection.end(ending.CLIENT_CLOSED)  # without a word, no resume
            return False
        if kind == MessageType.INVOCATION:
            await self._invoke(connection, message)
        elif kind == MessageType.STREAM_INVOCATION:
            await _reply(
                connection,
                message,
                error=f"The client attempted to invoke the non-streaming '{message['target']}' "
                "method with a streaming invocation.",
            )
        # Ping, CancelInvocation, Ack, Sequence, Completions for invocations this hub never
        # makes, and unknown types (as ASP.NET) need no answer.
        return True

    async def _invoke(self, connection: Connection, message: dict[str, Any]) -> None:
        target = message["target"]
        method = HUB_METHODS.get(target)
        if method is not None and not method.charged:  # it bounds its own cost (methods/)
            await _call(connection, message)
            return
        options = connection.options
        refusal = await ratelimit.acheck(ratelimit.INVOCATIONS, connection.user_id, options)
        if refusal is not None:
            self.refused += 1
            if self.refused >= options.rate_limit_flood:
                # It keeps going past its limit: end it (a reconnect counts on, too).
                await connection.end(ending.error(f"Connection closed with an error. {refusal}"))
                return
            error = f"{_failed(target)} HubException: {refusal}"
            await _reply(connection, message, error=error)
            return
        await _call(connection, message)


async def _call(connection: Connection, message: dict[str, Any]) -> None:
    """Call the hub method an invocation names, and answer it."""
    target, arguments = message["target"], message.get("arguments", [])
    method = HUB_METHODS.get(target)
    if method is None:
        error = f"{_failed(target)} HubException: Method does not exist."
        await _reply(connection, message, error=error)
        return
    if not isinstance(arguments, list) or len(arguments) != method.arity:
        count = len(arguments) if isinstance(arguments, list) else 1
        error = (
            f"{_failed(target)} InvalidDataException: Invocation provides "
            f"{count} argument(s) but target expects {method.arity}."
        )
        await _reply(connection, message, error=error)
        return
    try:
        result = await method.call(connection, *arguments)
    except HubError as exc:  # the method refused the call: the client is told why
        await _reply(connection, message, error=f"{_failed(target)} HubException: {exc}")
        return
    except Exception:
        logger.exception("hub method failed", extra={"action": "invoke", "target": target})
        error = f"An unexpected error occurred invoking '{target}' on the server."
        await _reply(connection, message, error=error)
        return
    await _reply(connection, message, result=result)


async def _reply(
    connection: Connection,
    message: dict[str, Any],
    *,
    result: Any = None,
    error: str | None = None,
) -> None:
    """Exactly one Completion for an invocation with an id; none without one."""
    invocation_id = message.get("invocationId")
    if invocation_id is not None:
        protocol = connection.protocol
        assert protocol is not None
        await connection.outbound.emit(
            protocol.completion(invocation_id, result=result, error=error)
        )


# Name -> method: one module each in methods/ (its docstring says how to add one).
HUB_METHODS: dict[str, HubMethod] = discover()


def _failed(target: str) -> str:
    return f"Failed to invoke '{target}' due to an error on the server."
