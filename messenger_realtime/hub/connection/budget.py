"""A connection's invocation budget: a token bucket of units (hub/connection/methods/
declares what each call costs), refilled at INVOCATION_BUDGET units a second up to
INVOCATION_BURST. Local to the connection and its event loop's clock: charging it is
arithmetic, never a round trip, so every message a client sends can pay (SignalR bounds
a client's parallel invocations, Phoenix gives each socket one process; here each
connection has a budget, and a client past it is refused, then closed as a flood)."""

from dataclasses import dataclass

from messenger_realtime.conf.settings import HubOptions


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A call refused for its connection's budget (the client is told this)."""

    rate: float
    burst: int

    def __str__(self) -> str:
        return (
            f"invocation budget exceeded: at most {self.rate:g} units a second "
            f"({self.burst} at once) on one connection"
        )


class Budget:
    """The units a connection may still spend, as of its loop's time `at`."""

    __slots__ = ("_at", "_left", "burst", "rate")

    def __init__(self, options: HubOptions, now: float) -> None:
        self.rate, self.burst = options.invocation_budget, options.invocation_burst
        self._left, self._at = float(self.burst), now

    def spend(self, units: int, now: float) -> OverBudget | None:
        """Take `units` if they are left (None), else nothing (the refusal)."""
        left = self._left = self._refilled(now)
        if left < units:
            return OverBudget(self.rate, self.burst)
        self._left = left - units
        return None

    def owe(self, units: int, now: float) -> None:
        """Take `units` of what is left, down to nothing (work already done: the next
        calls wait for the refill). Never below: a legitimate Recover of a thousand
        events must not have its client's next calls refused until it is closed as a
        flood; the user's rate limit in Redis is charged the whole of it."""
        self._left = max(0.0, self._refilled(now) - units)

    def _refilled(self, now: float) -> float:
        left = min(float(self.burst), self._left + (now - self._at) * self.rate)
        self._at = now
        return left
