"""Admission's line of negotiates (hub/admission.py), on an event loop of its own: a
finishing connect hands its slot to the first negotiate still in line, a negotiate that
leaves the line hands on a slot it was given, a wait runs out after ADMISSION_WAIT, and
an admitted negotiate's slot is held until the connection it granted opens."""

import asyncio

import pytest

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub import admission as admission_module
from messenger_realtime.hub.admission import Admission
from tests.support.runtime import run

OPTIONS = load_hub_options(admission_limit=1, admission_wait=30)


async def negotiate(admission: Admission, log: list[str], name: str, done: asyncio.Event) -> None:
    async with admission.connect(OPTIONS) as admitted:
        log.append(f"{name} {'admitted' if admitted else 'shed'}")
        await done.wait()


async def line_up(admission: Admission, count: int) -> None:
    while admission.waiting < count:
        await asyncio.sleep(0)  # let the tasks just created get in line


def test_slots_pass_to_the_line_first_come_first_served() -> None:
    async def scenario() -> list[str]:
        admission, log = Admission(), []
        events = {name: asyncio.Event() for name in "abc"}
        tasks = []
        for name in "abc":
            tasks.append(asyncio.create_task(negotiate(admission, log, name, events[name])))
            await line_up(admission, len(tasks) - 1)
        assert log == ["a admitted"] and admission.in_progress == 1
        events["a"].set()
        await line_up(admission, 1)
        while len(log) < 2:
            await asyncio.sleep(0)
        assert log == ["a admitted", "b admitted"] and admission.in_progress == 1
        events["b"].set()
        events["c"].set()
        await asyncio.gather(*tasks)
        assert admission.in_progress == 0 and admission.waiting == 0
        return log

    assert run(scenario()) == ["a admitted", "b admitted", "c admitted"]


def test_a_negotiate_that_leaves_the_line_hands_its_slot_on() -> None:
    async def scenario() -> list[str]:
        admission, log = Admission(), []
        hold, free = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(negotiate(admission, log, "a", hold))
        await asyncio.sleep(0)
        gone = asyncio.create_task(negotiate(admission, log, "gone", free))
        await line_up(admission, 1)
        last = asyncio.create_task(negotiate(admission, log, "c", free))
        await line_up(admission, 2)
        gone.cancel()  # its client went away while in line
        hold.set()
        free.set()
        await first
        await last
        assert gone.cancelled()
        assert admission.in_progress == 0
        return log

    assert run(scenario()) == ["a admitted", "c admitted"]


def test_a_wait_runs_out_and_counts_nothing() -> None:
    async def scenario() -> tuple[list[str], int]:
        admission, log = Admission(), []
        hold = asyncio.Event()
        first = asyncio.create_task(negotiate(admission, log, "a", hold))
        await asyncio.sleep(0)
        short = load_hub_options(admission_limit=1, admission_wait=0.01)
        async with admission.connect(short) as admitted:
            log.append("b admitted" if admitted else "b shed")
        hold.set()
        await first
        return log, admission.in_progress

    assert run(scenario()) == (["a admitted", "b shed"], 0)


def test_an_upgrade_past_the_limit_is_counted_and_its_end_frees_a_slot() -> None:
    async def scenario() -> list[str]:
        admission, log = Admission(), []
        opening = admission.opening("c1", "u")  # over the limit's worth already: still counted
        waiter = asyncio.create_task(negotiate(admission, log, "a", asyncio.Event()))
        await line_up(admission, 1)
        opening.done()
        opening.done()  # once only
        while not log:
            await asyncio.sleep(0)
        assert admission.in_progress == 1
        waiter.cancel()
        return log

    assert run(scenario()) == ["a admitted"]


async def admitted_for(admission: Admission, connection_id: str, user: str = "u") -> None:
    """A negotiate that granted `connection_id` to `user` (its slot held for it)."""
    async with admission.connect(OPTIONS) as slot:
        assert slot is not None
        slot.hold_for(connection_id, user)


def test_a_negotiates_slot_is_held_until_its_connection_opens() -> None:
    async def scenario() -> list[str]:
        admission, log = Admission(), []
        await admitted_for(admission, "c1")
        assert admission.in_progress == 1  # answered, but its client has not come yet
        waiter = asyncio.create_task(negotiate(admission, log, "b", asyncio.Event()))
        await line_up(admission, 1)
        opening = admission.opening("c1", "u")  # takes over the held slot: no second one
        assert admission.in_progress == 1 and admission.waiting == 1
        opening.done()  # its handshake answered: the slot goes to the line
        while not log:
            await asyncio.sleep(0)
        assert admission.in_progress == 1
        waiter.cancel()
        return log

    assert run(scenario()) == ["b admitted"]


def test_a_held_slot_goes_on_when_its_client_never_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admission_module, "RESERVED_FOR", 0.01)

    async def scenario() -> list[str]:
        admission, log = Admission(), []
        await admitted_for(admission, "c1")
        await negotiate(admission, log, "b", _set())  # waits for c1's slot to run out
        late = admission.opening("c1", "u")  # it came after all: counted on its own
        assert admission.in_progress == 1
        late.done()
        assert admission.in_progress == 0
        return log

    assert run(scenario()) == ["b admitted"]


def _set() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


def test_one_user_holds_at_most_admission_per_user_slots_until_they_open_or_run_out() -> None:
    # A client negotiating again and again without opening what it was granted would
    # hold every slot of the process for RESERVED_FOR each: past its cap it is refused.
    options = load_hub_options(admission_limit=100, admission_wait=30, admission_per_user=2)

    async def scenario() -> None:
        admission = Admission()
        for connection_id in ("a1", "a2"):
            assert admission.may_hold("alice", options)
            async with admission.connect(options) as slot:
                assert slot is not None
                slot.hold_for(connection_id, "alice")
        assert not admission.may_hold("alice", options)  # two held: her cap
        assert admission.may_hold("bob", options)  # another user is not held up
        admission.opening("a1", "alice").done()  # her connection opened: it counts no more
        assert admission.may_hold("alice", options)
        async with admission.connect(options) as slot:
            assert slot is not None
            slot.hold_for("a3", "alice")
        assert not admission.may_hold("alice", options)
        admission._expire("a2")  # a grant she never used ran out (RESERVED_FOR)
        assert admission.may_hold("alice", options)
        admission.opening("a3", "alice").done()
        assert admission.in_progress == 0 and admission._held_by == {}

    run(scenario())


def test_upgrades_without_a_held_slot_count_against_their_user_s_cap_too() -> None:
    """A WebSocket that skipped negotiate and never sends its handshake holds a connect
    in progress: at most ADMISSION_PER_USER of them (with held slots) per user."""
    options = load_hub_options(admission_limit=100, admission_wait=30, admission_per_user=2)

    async def scenario() -> None:
        admission = Admission()
        first = admission.opening("x1", "mallory")  # no negotiate: no held slot
        assert admission.may_open("mallory", options)
        async with admission.connect(options) as slot:
            assert slot is not None
            slot.hold_for("x2", "mallory")  # and one negotiated, not opened yet
        assert not admission.may_open("mallory", options)
        assert not admission.may_hold("mallory", options)
        assert admission.may_open("bob", options)
        first.done()
        assert admission.may_open("mallory", options)
        assert admission._opening_by == {}

    run(scenario())
