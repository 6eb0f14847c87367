"""One dispatcher pass against real PostgreSQL and a real channel layer (Redis)."""

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.dispatcher import Dispatcher, PassResult
from messenger_realtime.dispatch.sql import EXHAUSTED_ERROR
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.signals import realtime_dispatch_quarantined
from messenger_realtime.transport.publisher import ChannelLayerPublisher
from tests.support.dispatch import one_pass
from tests.support.helpers import (
    RecordingPublisher,
    db_now_offset,
    enqueue_message,
    layer,
    make_due,
    options,
    receive,
    subscribe,
)
from tests.support.runtime import free_port, run

pytestmark = pytest.mark.usefixtures("transactional_db")
NO_JITTER = {"backoff_jitter": 0.0}


async def pass_stopped_after(pushes: int, opts: RealtimeDispatchOptions) -> PassResult:
    """One pass whose publisher asks the dispatcher to stop after `pushes` events
    (as SIGTERM would, mid-pass)."""

    class StopAfter(RecordingPublisher):
        async def publish(self, event: OutgoingEvent) -> None:
            await super().publish(event)
            if len(self.events) == pushes:
                dispatcher.stop.set()

    dispatcher = Dispatcher(opts, StopAfter(), use_lock=False)
    try:
        return await dispatcher.run_pass()
    finally:
        await dispatcher.close()


def dead_layer_publisher() -> ChannelLayerPublisher:
    """A real channels-redis layer pointed at a port where no Redis listens."""
    return ChannelLayerPublisher(layer(f"redis://127.0.0.1:{free_port()}/0"))


@pytest.fixture
def quarantine_events() -> Any:
    events: list[Any] = []

    def receiver(sender: Any, event: Any, **kwargs: Any) -> None:
        events.append(event)

    realtime_dispatch_quarantined.connect(receiver)
    yield events
    realtime_dispatch_quarantined.disconnect(receiver)


def test_pending_message_is_pushed_to_its_chat_group_and_marked_done(redis_url: str) -> None:
    chat = uuid.uuid4()
    entry = enqueue_message(chat, seq=42)

    async def scenario() -> tuple[PassResult, Any]:
        channel_layer = layer(redis_url)
        channel = await subscribe(channel_layer, chat)
        result = await one_pass(options(), ChannelLayerPublisher(channel_layer))
        return result, await receive(channel_layer, channel)

    result, message = run(scenario())
    assert message["type"] == "realtime.event"
    assert message["event"] == "message_received"
    assert message["chat"] == str(chat)
    payload = message["payload"]
    assert (payload["chatId"], payload["messageId"], payload["seq"]) == (
        str(chat),
        str(entry.message_id),
        42,
    )
    assert payload["body"] == "body 42"  # the typed contract, built from the domain
    assert (result.dispatched, result.retried, result.quarantined) == (1, 0, 0)
    stored = RealtimeOutboxEntry.objects.get(id=entry.id)
    assert (stored.status, stored.attempts, stored.last_error) == ("Done", 1, None)


def test_empty_pass_makes_no_calls() -> None:
    not_due = enqueue_message()
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE messenger.realtime_outbox SET next_attempt_at = now() + interval '1 hour'"
        )
    publisher = RecordingPublisher()
    result = run(one_pass(options(), publisher))
    assert publisher.events == []
    assert (result.batches, result.dispatched) == (0, 0)
    assert RealtimeOutboxEntry.objects.get(id=not_due.id).attempts == 0


def test_unavailable_channel_layer_leaves_row_pending_with_backoff_then_delivers(
    redis_url: str,
) -> None:
    chat = uuid.uuid4()
    entry = enqueue_message(chat)
    result = run(one_pass(options(**NO_JITTER), dead_layer_publisher()))

    assert (result.dispatched, result.retried) == (0, 1)
    stored = RealtimeOutboxEntry.objects.get(id=entry.id)
    assert (stored.status, stored.attempts) == ("Pending", 1)
    assert (
        stored.last_error == "redis.exceptions.ConnectionError (code 111)"
    )  # class and code, no PII
    assert db_now_offset(entry.id) == pytest.approx(2.0, abs=0.5)  # BACKOFF_BASE, db clock

    async def later_passes() -> tuple[PassResult, PassResult, Any]:
        channel_layer = layer(redis_url)
        channel = await subscribe(channel_layer, chat)
        publisher = ChannelLayerPublisher(channel_layer)
        too_early = await one_pass(options(), publisher)
        await db_make_due(entry.id)
        delivered = await one_pass(options(), publisher)
        return too_early, delivered, await receive(channel_layer, channel)

    too_early, delivered, message = run(later_passes())
    assert too_early.dispatched == 0  # still inside its backoff window
    assert delivered.dispatched == 1 and message["payload"]["messageId"] == str(entry.message_id)
    stored = RealtimeOutboxEntry.objects.get(id=entry.id)
    assert (stored.status, stored.attempts, stored.last_error) == ("Done", 2, None)


async def db_make_due(entry_id: uuid.UUID) -> None:
    async with await psycopg.AsyncConnection.connect(db.conninfo(), autocommit=True) as conn:
        await conn.execute(
            "UPDATE messenger.realtime_outbox SET next_attempt_at = now() WHERE id = %s",
            (entry_id,),
        )


def test_poison_row_is_quarantined_at_exactly_max_attempts(quarantine_events: list[Any]) -> None:
    entry = enqueue_message()
    opts = options(max_attempts=3)
    publisher = RecordingPublisher(fail=True)
    seen = []
    for _ in range(4):  # attempts MAX-1, MAX, and a would-be MAX+1
        run(one_pass(opts, publisher))
        stored = RealtimeOutboxEntry.objects.get(id=entry.id)
        seen.append((stored.status, stored.attempts))
        make_due(entry.id)
    assert seen == [("Pending", 1), ("Pending", 2), ("Quarantined", 3), ("Quarantined", 3)]
    assert len(publisher.events) == 3  # never pushed again once quarantined
    assert [(e.OutboxEntryId, e.Kind, e.ChatId, e.Attempts) for e in quarantine_events] == [
        (entry.id, "MessageReceived", entry.chat_id, 3)
    ]
    assert RealtimeOutboxEntry.objects.get().last_error == "builtins.ConnectionError (code 111)"


def test_row_claimed_max_times_without_outcome_is_quarantined_without_a_push(
    quarantine_events: list[Any],
) -> None:
    entry = enqueue_message()
    RealtimeOutboxEntry.objects.filter(id=entry.id).update(attempts=3)  # three crashed claims
    publisher = RecordingPublisher()
    result = run(one_pass(options(max_attempts=3), publisher))
    stored = RealtimeOutboxEntry.objects.get(id=entry.id)
    assert (stored.status, stored.attempts, stored.last_error) == (
        "Quarantined",
        3,
        EXHAUSTED_ERROR,
    )
    assert publisher.events == [] and result.quarantined == 1
    assert [e.OutboxEntryId for e in quarantine_events] == [entry.id]


def test_eligibility_and_backoff_follow_the_database_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    due_in_an_hour = enqueue_message()
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE messenger.realtime_outbox SET next_attempt_at = now() + interval '1 hour'"
        )
    due_now = enqueue_message()
    # The app's clock says it is tomorrow; only PostgreSQL's now() may decide.
    tomorrow = timezone.now() + timezone.timedelta(days=1)
    monkeypatch.setattr(timezone, "now", lambda: tomorrow)
    publisher = RecordingPublisher(fail=True)
    run(one_pass(options(**NO_JITTER), publisher))
    assert [e.payload["messageId"] for e in publisher.events] == [str(due_now.message_id)]
    assert RealtimeOutboxEntry.objects.get(id=due_in_an_hour.id).attempts == 0
    assert db_now_offset(due_now.id) == pytest.approx(2.0, abs=0.5)


def test_pass_repeats_full_batches_and_stops_at_max_run_duration() -> None:
    for seq in range(35):
        enqueue_message(seq=seq)
    publisher = RecordingPublisher()
    result = run(one_pass(options(batch_size=10), publisher))
    assert (result.batches, result.dispatched) == (4, 35)
    seqs = [e.payload["seq"] for e in publisher.events]
    assert seqs == list(range(35))  # insert (UUIDv7) order

    for seq in range(35):
        enqueue_message(seq=seq)
    result = run(one_pass(options(batch_size=10, max_run_duration=1e-6), publisher))
    assert (result.batches, result.dispatched) == (1, 10)
    assert RealtimeOutboxEntry.objects.filter(status="Pending", attempts=0).count() == 25


def test_stop_between_rows_records_pushed_rows_and_releases_the_rest() -> None:
    for seq in range(5):
        enqueue_message(seq=seq)

    result = run(pass_stopped_after(2, options()))
    assert (result.dispatched, result.released) == (2, 3)
    rows = list(RealtimeOutboxEntry.objects.order_by("id").values_list("status", "attempts"))
    assert rows == [("Done", 1)] * 2 + [("Pending", 0)] * 3
    with connection.cursor() as cur:  # released rows are due at once, not after backoff
        cur.execute(
            "SELECT count(*) FROM messenger.realtime_outbox"
            " WHERE status = 'Pending' AND next_attempt_at <= now()"
        )
        assert cur.fetchone()[0] == 3


def test_outcome_never_overwrites_a_row_changed_after_its_claim() -> None:
    entry = enqueue_message()

    class OperatorQuarantinesMidPush(RecordingPublisher):
        async def publish(self, event: OutgoingEvent) -> None:
            await super().publish(event)
            async with await psycopg.AsyncConnection.connect(
                db.conninfo(), autocommit=True
            ) as conn:
                await conn.execute(
                    "UPDATE messenger.realtime_outbox SET status = 'Quarantined',"
                    " row_version = row_version + 1 WHERE id = %s",
                    (entry.id,),
                )

    result = run(one_pass(options(), OperatorQuarantinesMidPush()))
    assert (result.dispatched, result.stale) == (0, 1)
    assert RealtimeOutboxEntry.objects.get(id=entry.id).status == "Quarantined"


def test_retention_deletes_old_done_rows_in_batches_and_keeps_everything_else() -> None:
    rows = {name: enqueue_message() for name in ("p", "q", "recent")}
    old_done = [enqueue_message() for _ in range(5)]
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE messenger.realtime_outbox SET status = 'Done',"
            " updated_at = now() - interval '25 hours' WHERE id = ANY(%s)",
            [[e.id for e in old_done]],
        )
        cur.execute(
            "UPDATE messenger.realtime_outbox SET updated_at = now() - interval '25 hours',"
            " status = CASE WHEN id = %s THEN 'Quarantined' ELSE status END"
            " WHERE id = ANY(%s)",
            [rows["q"].id, [rows["p"].id, rows["q"].id]],
        )
        cur.execute(
            "UPDATE messenger.realtime_outbox SET status = 'Done' WHERE id = %s",
            [rows["recent"].id],
        )

    async def retention() -> int:
        dispatcher = Dispatcher(options(retention_batch=2), RecordingPublisher(), use_lock=False)
        try:
            return await dispatcher.run_retention()
        finally:
            await dispatcher.close()

    assert run(retention()) == 5
    left = dict(RealtimeOutboxEntry.objects.values_list("id", "status"))
    assert left == {rows["p"].id: "Pending", rows["q"].id: "Quarantined", rows["recent"].id: "Done"}


def test_the_next_two_batches_are_claimed_while_the_current_one_is_pushed() -> None:
    entries = [enqueue_message(seq=seq) for seq in range(6)]

    class WaitsForTheNextClaim(RecordingPublisher):
        saw_next_claim = False

        async def publish(self, event: OutgoingEvent) -> None:
            await super().publish(event)
            if len(self.events) > 1:
                return
            async with await psycopg.AsyncConnection.connect(db.conninfo()) as conn:
                for _ in range(500):  # up to ~5 s for the claim running ahead to commit
                    cur = await conn.execute(
                        "SELECT attempts FROM messenger.realtime_outbox WHERE id = %s",
                        (entries[4].id,),  # the first row of the third batch
                    )
                    if (await cur.fetchone()) == (1,):
                        self.saw_next_claim = True
                        return
                    await conn.rollback()
                    await asyncio.sleep(0.01)

    publisher = WaitsForTheNextClaim()
    result = run(one_pass(options(batch_size=2), publisher))
    assert publisher.saw_next_claim  # batch 3 committed its claim during batch 1's push
    assert (result.batches, result.dispatched) == (3, 6)
    assert [e.payload["seq"] for e in publisher.events] == [0, 1, 2, 3, 4, 5]


def test_stop_releases_the_batch_claimed_ahead_as_well() -> None:
    for seq in range(5):
        enqueue_message(seq=seq)

    result = run(pass_stopped_after(1, options(batch_size=2)))
    # Batch 1 pushed one row and released the other; the batches claimed ahead (batch 2
    # for sure, the fifth row too if its claim had started) went back whole. Nothing
    # lost, no attempt spent, every unsent row due at once.
    assert result.dispatched == 1
    assert (result.released, result.batches) in {(3, 2), (4, 3)}
    rows = list(RealtimeOutboxEntry.objects.order_by("id").values_list("status", "attempts"))
    assert rows == [("Done", 1)] + [("Pending", 0)] * 4
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM messenger.realtime_outbox"
            " WHERE status = 'Pending' AND next_attempt_at <= now()"
        )
        assert cur.fetchone()[0] == 4
