"""Dispatcher isolation: one chat's burst, one stuck read or one stale invitation never
harms the other rows (real PostgreSQL; events recorded at the publisher seam)."""

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now
from prometheus_client import REGISTRY

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.backoff import delay_table
from messenger_realtime.dispatch.build_thread import BUILD_TIMEOUT_ERROR
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.dispatch.store import NO_TARGET
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeDispatchKind as Kind
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import (
    ChatFactory,
    MessageFactory,
    OutboxEntryFactory,
    UserFactory,
    backlog,
)
from tests.support.helpers import RecordingPublisher, options
from tests.support.ports import HangingPort
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def chat_of(event: Any) -> uuid.UUID:
    return uuid.UUID(event.payload["chatId"])


def first_claim(limit: int) -> list[Any]:
    """The rows one fair claim of `limit` takes from the start of the walk, in push order."""

    async def claim() -> list[Any]:
        conn = await db.connect()
        shape = store.ClaimShape(limit, [1.0], 0.0, 8)
        outcomes, _ = await store.claim_fair(conn, shape, NO_TARGET)
        await conn.close()
        return [o.row for o in outcomes]

    return run(claim())


def test_a_burst_in_one_chat_does_not_hold_the_other_chats_rows() -> None:
    hot = ChatFactory()
    backlog(hot, 2000)  # committed first: FIFO by id would push all of it first
    others = [OutboxEntryFactory() for _ in range(20)]
    publisher = RecordingPublisher()
    result = run(one_pass(options(batch_size=200), publisher))
    assert result.dispatched == 2020
    first_batch = publisher.events[:200]
    assert {chat_of(e) for e in first_batch} >= {o.chat_id for o in others}
    hot_seqs = [e.payload["seq"] for e in publisher.events if chat_of(e) == hot.id]
    assert hot_seqs == list(range(1, 2001))  # the burst keeps its order


def test_a_burst_alone_still_fills_whole_batches() -> None:
    hot = ChatFactory()
    backlog(hot, 1000)
    result = run(one_pass(options(batch_size=200), RecordingPublisher()))
    assert (result.batches, result.dispatched) == (5, 1000)


def test_a_burst_next_to_a_quiet_chat_is_claimed_in_whole_batches_in_one_pass() -> None:
    quiet, hot = sorted([ChatFactory(), ChatFactory()], key=lambda chat: chat.id)
    OutboxEntryFactory(message__chat=quiet)
    backlog(hot, 999)  # the walk's cursor lands on the larger key after the first claim
    result = run(one_pass(options(batch_size=200), RecordingPublisher()))
    assert (result.batches, result.dispatched) == (5, 1000)


def test_a_walk_full_of_rows_not_due_yet_does_not_end_the_pass() -> None:
    # 250 chats whose only row is backing off (a Redis blip failed them together), then
    # a due row of another chat: the first walk of 200 targets claims nothing, and the
    # claim walks on instead of ending the pass.
    waiting = [OutboxEntryFactory(due_later=True) for _ in range(250)]
    last = ChatFactory(id=uuid.UUID(int=2**128 - 1))  # walked after every other target
    due = OutboxEntryFactory(message__chat=last)
    publisher = RecordingPublisher()
    result = run(one_pass(options(batch_size=200), publisher))
    assert result.dispatched == 1 and [chat_of(e) for e in publisher.events] == [due.chat_id]
    assert len(waiting) == RealtimeOutboxEntry.objects.filter(status=Status.PENDING).count()


def test_a_claim_walks_the_targets_not_due_yet_once_round_not_fifty_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 250 chats whose only row is backing off and nothing due: each walk of 200 targets
    # comes back full, so "walk on while walks come back full" re-walked the same ring
    # up to fifty times in every pass. Once round is enough.
    for _ in range(250):
        OutboxEntryFactory(due_later=True)
    walks: list[int] = []
    trailer = store._walk_and_claimed  # each walk-and-claim statement's result, read once

    def counted(rows: list[Any]) -> Any:
        (last_key, walked, keys, held), claimed = trailer(rows)
        walks.append(walked)
        return (last_key, walked, keys, held), claimed

    monkeypatch.setattr(store, "_walk_and_claimed", counted)
    result = run(one_pass(options(batch_size=200), RecordingPublisher()))
    assert result.dispatched == 0
    assert walks == [200, 200]  # the second walk comes round to targets already seen


def test_targets_take_turns_across_claims() -> None:
    # Two claims of 3 rows over 6 chats with one row each: the second claim starts where
    # the first stopped, so no chat waits for another's second turn.
    entries = [OutboxEntryFactory() for _ in range(6)]
    claimed: list[set[uuid.UUID]] = []

    async def two_claims() -> None:
        conn = await db.connect()
        shape = store.ClaimShape(3, delay_table(options()), 0.0, 8)
        cursor = NO_TARGET
        for _ in range(2):
            outcomes, cursor = await store.claim_fair(conn, shape, cursor)
            claimed.append({o.row.chat_id for o in outcomes})
        await conn.close()

    run(two_claims())
    assert len(claimed[0]) == len(claimed[1]) == 3
    assert claimed[0] | claimed[1] == {e.chat_id for e in entries}


def test_an_invitation_behind_a_20000_row_backlog_is_claimed_in_the_first_batch() -> None:
    with connection.cursor() as cur:  # a backlog's shape only: the claim reads no domain
        cur.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id)"
            " SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', %s"
            " FROM generate_series(1, 20000)",
            [uuid.uuid4()],
        )
    invite = OutboxEntryFactory(
        kind=Kind.CALL_INVITED,
        target_kind="User",
        target_user_id=uuid.uuid4(),
        ref_id=uuid.uuid4(),
        chat_id=None,
        message_id=None,
        seq=None,
    )

    claimed = [row.id for row in first_claim(200)]
    assert len(claimed) == 200
    assert claimed[0] == invite.id  # claimed, and pushed first


def test_an_invitation_claimed_ahead_takes_the_older_rows_of_its_stream_with_it() -> None:
    # The callee's user stream holds a ChatUpdated, then the invitation; eight chats'
    # messages are due too, and the walk of a 4-row claim reaches the chats first (the
    # callee's key is the highest). Urgent rows used to be claimed alone: the invitation
    # went out a batch ahead of the older row of its own stream (issue 60's soak: a
    # client saw offset 5 before 4 after a failover's backlog).
    callee = uuid.UUID(int=2**128 - 1)
    for _ in range(8):
        OutboxEntryFactory()
    stream = {"target_kind": "User", "target_user_id": callee, "message_id": None, "seq": None}
    older = OutboxEntryFactory(kind=Kind.CHAT_UPDATED, chat_id=uuid.uuid4(), **stream)
    invite = OutboxEntryFactory(kind=Kind.CALL_INVITED, chat_id=None, ref_id=uuid.uuid4(), **stream)

    claimed = [row.id for row in first_claim(4)]
    assert len(claimed) == 4
    assert [i for i in claimed if i in (older.id, invite.id)] == [older.id, invite.id]
    assert claimed[:2] == [older.id, invite.id]  # its stream first, in order


def test_one_streams_old_backlog_does_not_take_another_invitations_place() -> None:
    # Stream B: ten old ChatUpdated rows, then (later) a call invitation of its own;
    # between them, user A's invitation. The urgent share (6 of an 8-row claim)
    # is taken by the targets in the order of their first urgent row: A's first, then
    # B's prefix. Cut in plain id order, B's old rows took the whole share and A's
    # invitation waited behind another stream's backlog.
    low, high = uuid.UUID(int=1), uuid.UUID(int=2**128 - 1)  # B walked first, A last
    for _ in range(8):
        OutboxEntryFactory()

    def on_stream(user: uuid.UUID, kind: str, **more: Any) -> Any:
        return OutboxEntryFactory(
            kind=kind, target_kind="User", target_user_id=user, message_id=None, seq=None,
            **more,
        )  # fmt: skip

    for _ in range(10):
        on_stream(low, Kind.CHAT_UPDATED, chat_id=uuid.uuid4())
    invite = on_stream(high, Kind.CALL_INVITED, chat_id=None, ref_id=uuid.uuid4())
    on_stream(low, Kind.CALL_INVITED, chat_id=None, ref_id=uuid.uuid4())

    claimed = first_claim(8)
    assert len(claimed) == 8
    assert claimed[0].id == invite.id  # claimed, and its target first
    b_rows = [r for r in claimed if r.target_user_id == low]
    assert [r.kind for r in b_rows] == [Kind.CHAT_UPDATED] * len(b_rows)  # B's prefix only


def test_a_long_backlog_ahead_of_an_urgent_row_leaves_other_invitations_their_place() -> None:
    # A chat with 20 old messages, then a conference started in it (the oldest urgent
    # row); then user A's invitation. The chat's prefix up to its urgent row is 21 rows:
    # ranked first and uncapped, it took the whole urgent share (6 of 8) batch after
    # batch, and A's invitation waited behind another stream's backlog. Each urgent
    # target now gets an equal quota of the share.
    high = uuid.UUID(int=2**128 - 1)  # A: walked last
    for _ in range(8):
        OutboxEntryFactory()
    busy = ChatFactory()
    for _ in range(20):
        OutboxEntryFactory(message=MessageFactory(chat=busy))
    OutboxEntryFactory(
        kind=Kind.CONFERENCE_STARTED, chat_id=busy.id, ref_id=uuid.uuid4(), message_id=None,
        seq=None, session_kind="Conference",
    )  # fmt: skip
    invite = OutboxEntryFactory(
        kind=Kind.CALL_INVITED, target_kind="User", target_user_id=high, chat_id=None,
        ref_id=uuid.uuid4(), message_id=None, seq=None,
    )  # fmt: skip
    claimed = first_claim(8)
    assert invite.id in [r.id for r in claimed]
    busy_rows = [r for r in claimed if r.chat_id == busy.id]
    assert [r.kind for r in busy_rows] == [Kind.MESSAGE_RECEIVED] * len(busy_rows)


def test_an_urgent_flood_in_one_chat_leaves_a_share_of_each_batch_to_the_others() -> None:
    # 20,000 ConferenceEnded rows of one conference chat, then 20 messages of another
    # chat: urgent kinds used to take every batch whole, so the other chat waited for the
    # whole flood (5.7-8.4 s). Urgent rows are weighted now, not absolute.
    flood, other = uuid.uuid4(), uuid.uuid4()
    with connection.cursor() as cur:  # the rows' shape only: the claim reads no domain
        cur.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, ref_id,"
            " session_kind) SELECT gen_random_uuid(), 'ConferenceEnded', 'ChatGroup', %s,"
            " gen_random_uuid(), 'Conference' FROM generate_series(1, 20000)",
            [flood],
        )
        cur.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, seq)"
            " SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', %s, g"
            " FROM generate_series(1, 20) AS g",
            [other],
        )

    claimed = first_claim(200)
    assert len(claimed) == 200
    by_chat = {chat: [r for r in claimed if r.chat_id == chat] for chat in (flood, other)}
    assert len(by_chat[other]) == 20  # every row of the other chat, in the first batch
    assert len(by_chat[flood]) == 180  # the flood fills the rest: no batch goes short
    assert {r.kind for r in claimed[:180]} == {Kind.CONFERENCE_ENDED}  # pushed first


def expired_total(kind: str) -> float:
    value = REGISTRY.get_sample_value("messenger_realtime_expired_total", {"kind": kind})
    return value or 0.0


def test_an_expired_call_invitation_is_never_pushed_and_is_counted() -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    RealtimeOutboxEntry.objects.all().update(status=Status.DONE)  # the chat's own rows
    stale_call = services.start_call(alice.id, chat.id)
    services.cancel_call(alice.id, stale_call.id)
    fresh_call = services.start_call(alice.id, chat.id)
    invites = RealtimeOutboxEntry.objects.filter(kind=Kind.CALL_INVITED, status=Status.PENDING)
    invites.filter(ref_id=stale_call.id).update(created_at=Now() - timedelta(seconds=46))
    before = expired_total(Kind.CALL_INVITED)
    publisher = RecordingPublisher()
    run(one_pass(options(), publisher))
    invited = [e.payload["callId"] for e in publisher.events if e.name == "call_invited"]
    assert invited == [str(fresh_call.id)]
    stale = RealtimeOutboxEntry.objects.get(kind=Kind.CALL_INVITED, ref_id=stale_call.id)
    assert stale.status == Status.DONE
    assert stale.last_error == "Expired: CallInvited older than 45 s, not pushed"
    assert expired_total(Kind.CALL_INVITED) == before + 1


def test_a_read_that_never_returns_holds_up_only_its_own_row() -> None:
    chat = ChatFactory()
    entries = [OutboxEntryFactory(message__chat=chat) for _ in range(10)]
    stuck = entries[4]
    port = HangingPort(stuck.message_id)
    publisher = RecordingPublisher()

    async def one_pass_with(port: HangingPort) -> Any:
        dispatcher = Dispatcher(options(build_timeout=0.3), publisher, use_lock=False, port=port)
        try:
            return await dispatcher.run_pass(), dispatcher.builder.abandoned
        finally:
            await dispatcher.close()

    try:
        (result, abandoned) = run(one_pass_with(port))
    finally:
        port.release.set()  # let the abandoned threads finish
    # The batch's read timed out; each row was then retried alone, at once, in the same
    # pass: nine delivered, the stuck one timed out again alone and waits for its backoff.
    # The batch's claim was given back (none of its rows was tried alone): one attempt.
    assert sorted(e.payload["seq"] for e in publisher.events) == sorted(
        e.seq for e in entries if e != stuck
    )
    assert (result.dispatched, abandoned, port.stuck_reads) == (9, 2, 2)
    row = RealtimeOutboxEntry.objects.get(id=stuck.id)
    assert (row.status, row.attempts, row.last_error) == (Status.PENDING, 1, BUILD_TIMEOUT_ERROR)
    assert row.claimed_at is not None  # still a suspect: it will be tried alone again


def test_a_row_on_its_last_attempt_is_not_quarantined_for_a_neighbours_hung_read() -> None:
    chat = ChatFactory()
    entries = [OutboxEntryFactory(message__chat=chat) for _ in range(3)]
    stuck, last_try = entries[0], entries[1]
    max_attempts = options().max_attempts
    RealtimeOutboxEntry.objects.filter(id=last_try.id).update(attempts=max_attempts - 1)
    port = HangingPort(stuck.message_id)

    async def one_pass_with(port: HangingPort) -> Any:
        publisher = RecordingPublisher()
        dispatcher = Dispatcher(options(build_timeout=0.3), publisher, use_lock=False, port=port)
        try:
            return await dispatcher.run_pass()
        finally:
            await dispatcher.close()

    try:
        run(one_pass_with(port))
    finally:
        port.release.set()
    row = RealtimeOutboxEntry.objects.get(id=last_try.id)
    # Claimed with the batch (attempt MAX), given back when the batch was isolated, then
    # tried alone (attempt MAX again) and delivered.
    assert (row.status, row.attempts) == (Status.DONE, max_attempts)


def test_rows_that_fail_together_do_not_come_due_together() -> None:
    OutboxEntryFactory.create_batch(40)
    run(one_pass(options(backoff_jitter=0.5), RecordingPublisher(fail=True)))
    due = list(RealtimeOutboxEntry.objects.values_list("next_attempt_at", flat=True))
    assert len(set(due)) == 40  # one jitter draw per row, not one per claim


def test_a_build_that_fails_for_one_row_fails_only_that_row() -> None:
    class FailingPort(HangingPort):
        def messages(self, ids: Any) -> Any:
            if self.poison in set(ids):
                raise RuntimeError("cannot read this one")
            return super().messages(ids)

    entries = [OutboxEntryFactory() for _ in range(5)]
    port = FailingPort(entries[2].message_id)
    publisher = RecordingPublisher()

    async def go() -> Any:
        dispatcher = Dispatcher(options(), publisher, use_lock=False, port=port)
        try:
            return await dispatcher.run_pass()
        finally:
            await dispatcher.close()

    result = run(go())
    assert result.dispatched == 4
    failed = RealtimeOutboxEntry.objects.get(id=entries[2].id)
    assert (failed.status, failed.last_error) == (Status.PENDING, "builtins.RuntimeError")
    assert asyncio.iscoroutinefunction(store.claim_fair)  # the claim API stays async


def test_nothing_is_claimed_ahead_while_the_hub_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    OutboxEntryFactory.create_batch(40)
    steps: list[str] = []
    claim = store.claim_fair

    async def logged_claim(*args: Any, **kwargs: Any) -> Any:
        outcomes, cursor = await claim(*args, **kwargs)
        steps.append(f"claim {len(outcomes)}")
        return outcomes, cursor

    class BehindHub(RecordingPublisher):
        async def publish(self, event: Any) -> None:
            await super().publish(event)
            steps.append("push")

        async def hub_backlog(self, within: int | None = None) -> int:
            return 10**6  # always behind: every push waits (briefly, HUB_BACKLOG_WAIT)

    monkeypatch.setattr(store, "claim_fair", logged_claim)
    opts = options(batch_size=10, hub_backlog_wait=0.01)
    result = run(one_pass(opts, BehindHub()))
    assert result.dispatched == 40
    claims = [step for step in steps if step.startswith("claim") and step != "claim 0"]
    assert claims == ["claim 10"] * 4
    # Pushes done when each full claim came back. Batch 2 is claimed as soon as batch 1
    # proves full, and batch 3 as soon as batch 2 does, which may be before batch 1's first
    # push reports the hub behind (at most two batches ahead: batches.py). Once it is
    # known behind, no claim runs ahead: batch 4 only once batch 3 was pushed.
    pushed_at_claim = [
        steps[:at].count("push")
        for at, step in enumerate(steps)
        if step.startswith("claim") and step != "claim 0"
    ]
    assert pushed_at_claim[3] >= 30, steps
