"""Client-to-server hub messages: invocations of the hub's methods and their completions,
and what each message costs.

A part of HubConnection (`invocations`) whose state is its own: its connection's budget
(budget.py), the last refusal of its user's rate limit while it holds, and how many
messages were refused; it is handed its user's share of the process (a Budget the
HubProcess keeps). Every message the client sends pays here, the one place where a cost
is applied: an invocation what its method declares (methods/: its `Cost`, to both
budgets and, when `shared`, to the user's rate limit in Redis), anything else (a Ping,
an Ack, a completion, an unknown type) one unit of both budgets (lifecycle.py calls
`pay` for the Pings Daphne takes itself and for stateful reconnect's Acks). A refused
invocation is answered with the reason; past RATE_LIMIT_FLOOD refusals the connection
is closed as a flood. The connection is passed to `handle` with each message, never
kept. Wording of errors follows ASP.NET Core SignalR, which clients may show or match.
"""

import dataclasses
from typing import Any

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import HubError
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection.budget import Budget, OverBudget
from messenger_realtime.hub.connection.methods import Billed, HubMethod, discover
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.protocols.base import MessageType
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)
BUDGET = "budget"  # messenger_realtime_hub_rate_limited_total's scope for the budget
# A connection closed as a flood costs its user this many connects of RATE_LIMIT_CONNECTS
# (120 a minute): one user's 32 connections flooding at once leave no reconnect in the
# window, where each used to reconnect and flood again, 120 times a minute.
FLOOD_CONNECTS = 10


class Invocations:
    """What a connection's client invokes: charged, answered, counted when refused."""

    __slots__ = ("budget", "limited", "refused", "user_budget")

    def __init__(self, options: HubOptions, now: float, user_budget: Budget) -> None:
        self.budget = Budget.of_connection(options, now)
        self.user_budget = user_budget  # its user's share of the process (budget.py)
        self.refused = 0  # messages refused on this connection, for its budget or the limit
        # The user's rate limit's last refusal and until when (loop time) it holds: a
        # shared call meanwhile is refused here, without a round trip (a flood of them
        # made one per call, ~640 for one user's 32 connections).
        self.limited: tuple[float, ratelimit.Refusal] | None = None

    def flooding(self, options: HubOptions) -> bool:
        """Refused once more: whether that makes it a flood (the connection is ended)."""
        self.refused += 1
        return self.refused >= options.rate_limit_flood

    def pay(self, now: float, options: HubOptions) -> ending.Ending | None:
        """One unit for a message that is not an invocation (a Ping, an Ack, a Sequence,
        a completion): None, or how the connection ends when that refusal makes it a
        flood (nothing is answered to such a message, refused or not)."""
        over = self.budget.spend(1, now, self.user_budget)
        if over is None:
            return None
        metrics.hub_rate_limited.labels(scope=BUDGET).inc()
        return flood(over) if self.flooding(options) else None

    async def handle(self, connection: Connection, message: dict[str, Any]) -> bool:
        """Charge and act on one message from the client; False when the connection was
        closed."""
        kind = message["type"]
        if kind == MessageType.INVOCATION:
            return await self._invoke(connection, message)
        flooded = self.pay(connection.loop.time(), connection.options)
        if flooded is not None:
            await connection.end(flooded)
            return False
        if kind == MessageType.CLOSE:
            await connection.end(ending.CLIENT_CLOSED)  # without a word, no resume
            return False
        if kind == MessageType.STREAM_INVOCATION:
            await _reply(
                connection,
                message,
                error=f"The client attempted to invoke the non-streaming '{message['target']}' "
                "method with a streaming invocation.",
            )
        # Ping, CancelInvocation, Ack, Sequence, Completions for invocations this hub never
        # makes, and unknown types (as ASP.NET) need no answer.
        return True

    async def _invoke(self, connection: Connection, message: dict[str, Any]) -> bool:
        target, arguments = message["target"], message.get("arguments", [])
        method = HUB_METHODS.get(target)
        units = 1
        if method is not None and isinstance(arguments, list):
            units = method.cost.units(arguments)
        options = connection.options
        refusal: OverBudget | ratelimit.Refusal | None
        now = connection.loop.time()
        refusal = self.budget.spend(units, now, self.user_budget)
        if refusal is not None:
            metrics.hub_rate_limited.labels(scope=BUDGET).inc()
        elif method is not None and method.cost.shared:
            refusal = await self._shared(connection, units, now)
        if refusal is not None:
            if self.flooding(options):
                # It keeps going past its bounds: end it (a reconnect counts on, too).
                await connection.end(flood(refusal))
                return False
            await _reply(connection, message, error=f"{_failed(target)} HubException: {refusal}")
            return True
        await self._call(connection, message, method)
        return True

    async def _shared(
        self, connection: Connection, units: int, now: float
    ) -> ratelimit.Refusal | None:
        """Charge the user's rate limit (Redis), unless it refused lately and the
        refusal still holds."""
        limited = self.limited
        if limited is not None:
            if now < limited[0]:
                metrics.hub_rate_limited.labels(scope=ratelimit.INVOCATIONS).inc()
                return limited[1]
            self.limited = None
        refusal = await ratelimit.acheck(
            ratelimit.INVOCATIONS, connection.user_id, connection.options, units
        )
        if refusal is not None:
            self.limited = (now + refusal.retry_after, refusal)
        return refusal

    async def _call(
        self, connection: Connection, message: dict[str, Any], method: HubMethod | None
    ) -> None:
        """Call the hub method an invocation names, and answer it."""
        target, arguments = message["target"], message.get("arguments", [])
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
        if isinstance(result, Billed):  # what it turned out to cost, beyond its Cost
            result, units = result
            if units > 0:
                self.budget.owe(units, connection.loop.time())
                self.user_budget.owe(units, connection.loop.time())
                if method.cost.shared:
                    await ratelimit.acharge(
                        ratelimit.INVOCATIONS, connection.user_id, units, connection.options
                    )
        await _reply(connection, message, result=result)


def flood(refusal: OverBudget | ratelimit.Refusal) -> ending.Ending:
    """How a connection that keeps going past its bounds ends: a Close naming the bound,
    and nothing more of what it sends is read (it would be read at line rate until its
    client's own Close came, behind all it had sent; the server's close-handshake
    timeout ends it instead)."""
    message = f"Connection closed with an error. {refusal}"
    how = ending.error(message)
    return dataclasses.replace(how, drop=True, metric="flood", connects_charged=FLOOD_CONNECTS)


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
