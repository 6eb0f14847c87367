"""Invocation budgets: token buckets of units (hub/connection/methods/ declares what each
call costs), refilled at a rate up to a burst. Local: charging one is arithmetic, never a
round trip, so every message a client sends can pay (SignalR bounds a client's parallel
invocations, Phoenix gives each socket one process; here each connection has a budget,
and a client past it is refused, then closed as a flood).

Two budgets pay for each message: its connection's (INVOCATION_BUDGET units a second up
to INVOCATION_BURST) and its user's share of the process (USER_SHARE times that, for all
the user's connections to this process together, `Budgets`): one user's 32 connections
flooding at once spend a process at most what two connections could, not 32 bursts (the
bystander's REST p95 went from 18 to 51 ms while they opened).
"""

import weakref
from dataclasses import dataclass
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions

USER_SHARE = 2  # a user's connections to one process together: this many connections' worth
# What reading a client's bytes costs, beside what its calls declare: a unit per this many
# bytes of a frame (or POST body), paid before it is parsed by waiting, not refused, so a
# client sending more than its budget is held back by TCP while the hub waits (its socket
# is not read meanwhile). Parsing refused records was what was left of a flood's cost: 32
# connections of 15 KB calls moved a bystander's REST p95 to 2.2x its baseline.
BYTES_PER_UNIT = 4096


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A call refused for a budget (the client is told this)."""

    rate: float
    burst: int
    whose: str  # "one connection", "one user's connections to this server"

    def __str__(self) -> str:
        return (
            f"invocation budget exceeded: at most {self.rate:g} units a second "
            f"({self.burst} at once) on {self.whose}"
        )


class Budget:
    """The units still to spend, as of the loop's time `at`."""

    __slots__ = ("__weakref__", "_at", "_left", "burst", "rate", "whose")

    def __init__(self, rate: float, burst: int, now: float, whose: str) -> None:
        self.rate, self.burst, self.whose = rate, burst, whose
        self._left, self._at = float(burst), now

    @classmethod
    def of_connection(cls, options: HubOptions, now: float) -> "Budget":
        return cls(options.invocation_budget, options.invocation_burst, now, "one connection")

    def spend(self, units: int, now: float, *also: "Budget") -> OverBudget | None:
        """Take `units` from this budget and each of `also` if all have them left (None),
        else from none (the refusal, naming the first that has not)."""
        for budget in (self, *also):
            if budget._refill(now) < units:
                return OverBudget(budget.rate, budget.burst, budget.whose)
        for budget in (self, *also):
            budget._left -= units
        return None

    def delay(self, units: int, now: float, *also: "Budget") -> float:
        """Take `units` from this budget and each of `also` even past what is left, and
        say how long the taker must wait (seconds) for the slowest to be even again: a
        frame's bytes, read already, are paid by waiting, not refused. At most a burst
        is owed."""
        wait = 0.0
        for budget in (self, *also):
            budget._left = max(-float(budget.burst), budget._refill(now) - units)
            if budget._left < 0:
                wait = max(wait, -budget._left / budget.rate)
        return wait

    def owe(self, units: int, now: float) -> None:
        """Take `units` of what is left, down to nothing (work already done: the next
        calls wait for the refill). Never below: a legitimate Recover of a thousand
        events must not have its client's next calls refused until it is closed as a
        flood; the user's rate limit in Redis is charged the whole of it."""
        self._left = max(0.0, self._refill(now) - units)

    def _refill(self, now: float) -> float:
        self._left = min(float(self.burst), self._left + (now - self._at) * self.rate)
        self._at = now
        return self._left


class Budgets:
    """A process's share of each user (`for_user`): one Budget per user with a connection
    here, kept while a connection holds it (a connection's Invocations does)."""

    def __init__(self) -> None:
        self._users: weakref.WeakValueDictionary[UUID, Budget] = weakref.WeakValueDictionary()

    def for_user(self, user_id: UUID, options: HubOptions, now: float) -> Budget:
        budget = self._users.get(user_id)
        if budget is None:
            rate = USER_SHARE * options.invocation_budget
            burst = USER_SHARE * options.invocation_burst
            whose = "one user's connections to this server"
            budget = self._users[user_id] = Budget(rate, burst, now, whose)
        return budget
