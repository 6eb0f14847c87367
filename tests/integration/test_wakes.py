"""Coalesced wake-ups against real PostgreSQL and a real dispatcher loop: NOTIFYs that
arrive within the window after a pass that claimed rows wake one pass between them, held
until the window after that pass, while an event after a quiet spell or a pass that
found nothing wakes a pass at once (pass counts and wake records, no timing); a pass cut
short by MAX_RUN_DURATION goes on at once; and the suspect probe's pace."""

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models.functions import Now

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.dispatcher import Dispatcher, PassResult
from messenger_realtime.dispatch.wakes import Listener, Wake, WakePolicy
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.notify import NOTIFY_CHANNEL
from tests.support.factories import ChatFactory, MessageFactory, OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, commit_message_received, options
from tests.support.runtime import run, wait_until

pytestmark = pytest.mark.usefixtures("transactional_db")


class RecordingDispatcher(Dispatcher):
    """Records each pass's dispatched count and each wake-up."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes: list[int] = []
        self.wake_log: list[Wake] = []
        waiting = self.listener.wait

        async def recording_wait(*args: Any) -> Wake:
            wake = await waiting(*args)
            self.wake_log.append(wake)
            return wake

        self.listener.wait = recording_wait  # type: ignore[method-assign]

    async def run_pass(self) -> PassResult:
        result = await super().run_pass()
        self.passes.append(result.dispatched)
        return result


@pytest.fixture
def running() -> Iterator[Any]:
    """Start a RecordingDispatcher on its own thread and event loop; stop it at the end."""
    started: list[tuple[RecordingDispatcher, threading.Thread, list[Any]]] = []

    def start(**overrides: Any) -> RecordingDispatcher:
        opts = dataclasses.replace(options(), polling_interval=30.0, **overrides)
        dispatcher = RecordingDispatcher(opts, RecordingPublisher(), use_lock=False)
        loops: list[asyncio.AbstractEventLoop] = []

        async def main() -> None:
            loops.append(asyncio.get_running_loop())
            await dispatcher.run()

        thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        thread.start()
        started.append((dispatcher, thread, loops))
        wait_until(lambda: dispatcher.passes, what="the catch-up pass")
        return dispatcher

    yield start
    for dispatcher, thread, loops in started:
        loops[0].call_soon_threadsafe(dispatcher.stop.set)
        thread.join(timeout=30)
        assert not thread.is_alive()


def all_done() -> bool:
    return not RealtimeOutboxEntry.objects.exclude(status="Done").exists()


def test_notifies_within_the_window_after_a_pass_wake_one_pass(running: Any) -> None:
    chat = ChatFactory()
    first, *rest = [MessageFactory(chat=chat) for _ in range(11)]
    commit_message_received(first)  # before the worker starts: its catch-up pass has it
    # A window far longer than ten commits take: the wake holds it out, then one pass
    # serves every commit meanwhile (a NOTIFY read with the first may go uncounted).
    dispatcher = running(wake_coalesce=2.0)
    assert dispatcher.passes == [1]  # the catch-up pass claimed a row: a stream

    for message in rest:  # ten commits, ten NOTIFYs, while it is open
        commit_message_received(message)
    wait_until(all_done, what="every row Done")
    wait_until(lambda: len(dispatcher.passes) == 2, what="the coalesced pass")

    assert dispatcher.passes == [1, 10]  # one pass for the ten commits
    coalesced = dispatcher.wake_log[0]
    assert coalesced.notified and coalesced.notifies >= 2 and coalesced.held > 0


def test_commits_after_a_pass_that_found_nothing_wake_a_pass_at_once(running: Any) -> None:
    message = MessageFactory()
    dispatcher = running(wake_coalesce=2.0)  # a window that would show in the wake
    assert dispatcher.passes == [0]  # the catch-up pass: nothing to claim
    commit_message_received(message)
    wait_until(all_done, what="the row Done")
    wait_until(lambda: len(dispatcher.passes) == 2, what="its pass")
    assert dispatcher.passes == [0, 1]
    assert dispatcher.wake_log[0].held == 0.0  # it did not wait


def test_an_event_after_a_quiet_spell_wakes_a_pass_at_once(running: Any) -> None:
    message = MessageFactory()
    dispatcher = running()  # the default window
    commit_message_received(message)
    wait_until(all_done, what="the row Done")
    wait_until(lambda: len(dispatcher.passes) == 2, what="its pass")
    assert dispatcher.passes == [0, 1]
    assert dispatcher.wake_log[0] == Wake(notified=True, notifies=1, held=0.0)


def test_the_policy_holds_until_the_window_after_a_pass_that_claimed_rows() -> None:
    policy = WakePolicy(window=60.0)
    assert policy.hold_until() is None  # no pass yet
    policy.pass_ended(rows=0)
    assert policy.hold_until() is None  # it found nothing: wake at once
    policy.pass_ended(rows=1)
    # Streaming: wait until the window after that pass, not a window from now.
    assert policy.hold_until() == policy.last_pass_ended + 60.0
    policy.last_pass_ended -= 59.0
    assert policy.hold_until() == policy.last_pass_ended + 60.0  # a second is left
    policy.last_pass_ended -= 2.0  # that pass ended longer ago than the window
    assert policy.hold_until() is None
    off = WakePolicy(window=0.0)
    off.pass_ended(rows=5)
    assert off.hold_until() is None


def test_suspects_are_probed_once_per_interval_and_after_every_retry() -> None:
    policy = WakePolicy(window=0.01, probe_every=60.0)
    assert policy.suspects_due(retried=0)  # the first pass probes
    assert not policy.suspects_due(retried=0)  # then once per interval
    assert policy.suspects_due(retried=3)  # rows retried alone at once: probe now
    policy.last_probe -= 61.0
    assert policy.suspects_due(retried=0)


def test_a_pass_cut_short_by_max_run_duration_goes_on_without_a_notify(running: Any) -> None:
    chat = ChatFactory()
    for message in [MessageFactory(chat=chat) for _ in range(30)]:
        commit_message_received(message)  # all committed (and notified) before the start
    # Every pass ends after one batch of ten; no NOTIFY comes after the catch-up pass, and
    # the next poll is 30 s away: only going on at once drains the rest within the wait.
    dispatcher = running(batch_size=10, max_run_duration=1e-6)
    wait_until(all_done, what="the backlog drained without a NOTIFY or a poll")
    # The last pass's rows are Done before that pass returns and is recorded.
    wait_until(lambda: len(dispatcher.passes) >= 3, what="the third pass recorded")
    assert dispatcher.passes[:3] == [10, 10, 10]
    assert not any(wake.notified for wake in dispatcher.wake_log[:2])


def test_a_backlog_of_suspects_drains_beside_a_backlog_without_waiting_for_polls(
    running: Any,
) -> None:
    # Suspects (a crashed worker's batch) used to get one claim per pass once the batches
    # had used the pass's MAX_RUN_DURATION, and a probe only once per POLLING_INTERVAL
    # (30 s here): twenty suspects next to a backlog waited twenty polls. Now suspects
    # get a budget of their own in every pass, and a pass that ran out of it with
    # suspects still due is followed by another that probes again at once.
    chat = ChatFactory()
    for message in [MessageFactory(chat=chat) for _ in range(40)]:
        commit_message_received(message)
    suspects = [OutboxEntryFactory(attempts=1, claimed_at=Now()) for _ in range(20)]
    dispatcher = running(batch_size=10, max_run_duration=1e-6)
    wait_until(all_done, what="the backlog and every suspect Done, with no poll")
    assert not dispatcher.wake_log  # no idle wait came between the passes
    assert sum(dispatcher.passes) == 40 + len(suspects)


def test_a_wake_reads_every_notify_already_waiting_not_one_socket_read() -> None:
    # A backlog's NOTIFYs pile up while passes go on at once; one socket read holds about a
    # thousand. Reading only that left the rest to end the next idle wait at once, for a
    # pass with nothing new, read after read.
    async def wakes_after_a_pile_of(notifies: int) -> list[Wake]:
        listener = Listener()
        await listener.listen()
        sender = await db.connect()
        try:
            async with sender.transaction():  # distinct payloads: identical ones fold
                await sender.execute(
                    "SELECT pg_notify(%s, i::text) FROM generate_series(1, %s) AS i",
                    [NOTIFY_CHANNEL, notifies],
                )
            stop, wakes = asyncio.Event(), []
            wake = await listener.wait(30.0, (stop,), WakePolicy(window=0.0))
            while wake.notified and len(wakes) < 20:  # until a wait hears nothing more
                wakes.append(wake)
                wake = await listener.wait(0.2, (stop,), WakePolicy(window=0.0))
            return wakes
        finally:
            await sender.close()
            await listener.close()

    wakes = run(wakes_after_a_pile_of(5000))
    # The first wake may come while the server is still writing the pile (then it holds
    # only what had arrived, and the next wake the rest); the counts are lower bounds
    # (the first read's batch past the first NOTIFY is not counted). Read one socket read
    # per wake, the pile would take five wakes of about a thousand each.
    counts = [wake.notifies for wake in wakes]
    assert len(wakes) <= 3 and max(counts) > 2500, counts
