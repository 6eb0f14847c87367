"""The process's one clock for every connection's deadlines (hub/clock.py): owners are
called in time order from one loop timer, an earlier schedule replaces a later one, a
cancelled or replaced entry never fires, and one owner's failure does not stop others."""

import asyncio

from messenger_realtime.hub import clock
from tests.support.runtime import run


class Owner:
    def __init__(self, name: str, fired: list[str], fail: bool = False) -> None:
        self.name, self.fired, self.fail = name, fired, fail
        self.entry: clock.Entry | None = None

    def fire(self, now: float) -> None:
        self.fired.append(self.name)
        if self.fail:
            raise RuntimeError("this owner fails")


def test_owners_fire_in_time_order_and_an_earlier_schedule_replaces_a_later_one() -> None:
    async def scenario() -> list[str]:
        loop, fired, done = asyncio.get_running_loop(), [], asyncio.Event()
        c = clock.Clock(asyncio.get_running_loop())
        now = loop.time()
        owners = {n: Owner(n, fired) for n in ("a", "b", "c", "d")}
        owners["c"].entry = c.schedule(owners["c"], now + 0.03, None)
        owners["a"].entry = c.schedule(owners["a"], now + 0.02, None)
        owners["b"].entry = c.schedule(owners["b"], now + 0.05, None)
        # Moved earlier: the new entry replaces the old one (b fires once, first).
        owners["b"].entry = c.schedule(owners["b"], now + 0.01, owners["b"].entry)
        # A later time for an owner already due earlier keeps the earlier entry.
        assert c.schedule(owners["a"], now + 0.5, owners["a"].entry) is owners["a"].entry
        owners["d"].entry = c.schedule(owners["d"], now + 0.015, None)
        clock.cancel(owners["d"].entry)  # its connection ended: never fires
        last = Owner("last", fired)
        last.fire = lambda now: done.set()  # type: ignore[method-assign]
        c.schedule(last, now + 0.06, None)
        await asyncio.wait_for(done.wait(), 5)
        return fired

    assert run(scenario()) == ["b", "a", "c"]


def test_one_owner_failing_does_not_stop_the_others_due_with_it() -> None:
    async def scenario() -> list[str]:
        loop, fired = asyncio.get_running_loop(), []
        c, done = clock.Clock(asyncio.get_running_loop()), asyncio.Event()
        when = loop.time() + 0.01
        c.schedule(Owner("bad", fired, fail=True), when, None)
        c.schedule(Owner("good", fired), when, None)
        closer = Owner("closer", fired)
        closer.fire = lambda now: done.set()  # type: ignore[method-assign]
        c.schedule(closer, when + 0.01, None)
        await asyncio.wait_for(done.wait(), 5)
        return fired

    assert run(scenario()) == ["bad", "good"]


def test_thousands_of_owners_share_one_loop_timer() -> None:
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        c = clock.Clock(asyncio.get_running_loop())
        fired: list[str] = []
        for n in range(5000):
            c.schedule(Owner(str(n), fired), loop.time() + 60 + n / 1000, None)
        timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        return len(c), len(timers)

    entries, timers = run(scenario())
    assert entries == 5000 and timers == 1


def test_deadlines_within_one_granule_fire_together_and_never_early() -> None:
    async def scenario() -> list[tuple[float, float]]:
        loop, calls, done = asyncio.get_running_loop(), [], asyncio.Event()
        c = clock.Clock(asyncio.get_running_loop())
        edge = clock.on_grid(loop.time() + 0.2)  # a point of the grid ahead
        for k in range(40):  # one a millisecond, over the 50 ms granule that ends at `edge`
            when = edge - 0.045 + k * 0.001
            owner = Owner(str(k), [])
            owner.fire = lambda now, when=when: calls.append((when, now))  # type: ignore[method-assign]
            c.schedule(owner, when, None)
        closer = Owner("closer", [])
        closer.fire = lambda now: done.set()  # type: ignore[method-assign]
        c.schedule(closer, edge + clock.GRANULE, None)
        await asyncio.wait_for(done.wait(), 5)
        return calls

    calls = run(scenario())
    assert len(calls) == 40
    assert len({now for _, now in calls}) == 1  # one loop turn for the whole granule
    assert all(now >= when for when, now in calls)  # none fired before its deadline
