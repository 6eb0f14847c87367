"""The spec's log lines, one test each: visible at INFO, their fields, written only after
the outcome they report is committed (the probe reads the row as the line is emitted),
never a body or a token; and a pass's lines agree with its counts and the counters."""

import io
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.dispatch import connections as db
from messenger_realtime.ops.logging import KeyValueFormatter
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import ChatFactory, OutboxEntryFactory, UserFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
NEVER = ("body ", "eyJ", "access_token", "password")  # message bodies, JWTs, credentials
LINES = ("dispatched", "dispatch retry", "quarantined")  # a row's lines, as the counts


class Probe(logging.Handler):
    """Keeps each line as rendered, with the database's view of its row at that moment."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(KeyValueFormatter())
        self.conn = psycopg.connect(db.conninfo(), autocommit=True)
        self.lines: list[tuple[logging.LogRecord, str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        entry = getattr(record, "EntryId", None)
        if entry is not None:
            query = "SELECT status, attempts FROM messenger.realtime_outbox WHERE id = %s"
            seen = self.conn.execute(query, (entry,)).fetchone()
        else:  # a batch's or a pass's line: how the table stands
            query = (
                "SELECT status, attempts, count(*) FROM messenger.realtime_outbox"
                " GROUP BY status, attempts ORDER BY status, attempts"
            )
            seen = self.conn.execute(query).fetchall()
        self.lines.append((record, self.format(record), seen))

    def named(self, message: str) -> list[tuple[logging.LogRecord, str, Any]]:
        """The lines of `message` (the text before the fields the message carries)."""
        return [
            line
            for line in self.lines
            if line[0].getMessage() == message or line[0].getMessage().startswith(message + " ")
        ]


@pytest.fixture
def probe() -> Iterator[Probe]:
    app = logging.getLogger("messenger_realtime")
    handler, level = Probe(), app.level
    app.addHandler(handler)
    app.setLevel(logging.INFO)  # the default level: what an operator sees
    yield handler
    app.removeHandler(handler)
    app.setLevel(level)
    handler.conn.close()
    for _record, text, _seen in handler.lines:
        assert not any(word in text for word in NEVER), text


class FailingChat(RecordingPublisher):
    """The hub refuses events for one chat and takes every other."""

    def __init__(self, chat_id: Any) -> None:
        super().__init__()
        self.bad = f"chat:{chat_id}"

    async def publish(self, event: OutgoingEvent) -> None:
        self.events.append(event)
        if str(event.target) == self.bad:
            raise ConnectionError(111, "refused")


def test_a_hosts_plain_formatter_keeps_every_lines_fields() -> None:
    """A host's LOGGING with a bare `%(message)s` formatter (no extras rendered): the
    fields are in the message text itself, so a row can still be followed by EntryId.
    Before: `dispatched`, `batch claimed`, `job completed`, nothing else."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    app = logging.getLogger("messenger_realtime")
    level = app.level
    app.addHandler(handler)
    app.setLevel(logging.INFO)
    try:
        (row,) = OutboxEntryFactory.create_batch(1)
        run(one_pass(options(), RecordingPublisher()))
    finally:
        app.removeHandler(handler)
        app.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert f"EntryId={row.id}" in next(line for line in lines if line.startswith("dispatched "))
    assert f"Seq={row.seq}" in next(line for line in lines if line.startswith("dispatched "))
    assert "rows=1" in next(line for line in lines if line.startswith("batch claimed "))
    assert "dispatched=1" in next(line for line in lines if line.startswith("job completed "))


def test_the_apps_formatter_writes_each_field_once(probe: Probe) -> None:
    OutboxEntryFactory.create_batch(1)
    run(one_pass(options(), RecordingPublisher()))
    ((_record, text, _seen),) = probe.named("batch claimed")
    assert text.count("rows=1") == 1


def test_batch_claimed_is_logged_once_the_claim_committed_with_rows(probe: Probe) -> None:
    OutboxEntryFactory.create_batch(3)
    run(one_pass(options(), RecordingPublisher()))
    ((record, text, seen),) = probe.named("batch claimed")
    assert record.levelno == logging.INFO and record.rows == 3  # type: ignore[attr-defined]
    assert seen == [("Pending", 1, 3)]  # all three claimed (attempt 1), none pushed yet
    assert "rows=3" in text


def test_dispatched_names_kind_chat_seq_and_attempts_after_the_row_is_done(probe: Probe) -> None:
    rows = OutboxEntryFactory.create_batch(2)
    run(one_pass(options(), RecordingPublisher()))
    lines = probe.named("dispatched")
    assert [r.levelno for r, _, _ in lines] == [logging.INFO] * 2
    by_entry = {str(r.EntryId): (r, seen) for r, _, seen in lines}  # type: ignore[attr-defined]
    for row in rows:
        record, seen = by_entry[str(row.id)]
        fields = (record.Kind, record.ChatId, record.Seq, record.Attempts)  # type: ignore[attr-defined]
        assert fields == ("MessageReceived", row.chat_id, row.seq, 1)
        assert seen == ("Done", 1)


def test_dispatched_for_a_user_push_names_the_target_user_and_carries_no_credential(
    probe: Probe,
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    services.start_call(alice.id, chat.id)  # CallInvited to bob's user group
    run(one_pass(options(), RecordingPublisher()))
    (record, text, seen) = next(
        line
        for line in probe.named("dispatched")
        if line[0].Kind == "CallInvited"  # type: ignore[attr-defined]
    )
    assert record.TargetUserId == bob.id  # type: ignore[attr-defined]
    assert seen == ("Done", 1)
    assert "roomName" not in text and "Token" not in text


def test_dispatched_lines_follow_dispatched_log_sample(probe: Probe) -> None:
    OutboxEntryFactory.create_batch(4)
    result = run(one_pass(options(dispatched_log_sample=0), RecordingPublisher()))
    assert result.dispatched == 4
    assert probe.named("dispatched") == []
    (record, _text, _seen) = probe.named("job completed")[0]
    assert record.dispatched == 4  # type: ignore[attr-defined]  # the count stays exact


def test_dispatch_retry_names_entry_attempts_and_error_code_after_the_row_stays_pending(
    probe: Probe,
) -> None:
    row = OutboxEntryFactory()
    run(one_pass(options(), RecordingPublisher(fail=True)))
    ((record, _text, seen),) = probe.named("dispatch retry")
    assert record.levelno == logging.WARNING
    assert (record.EntryId, record.Attempts) == (row.id, 1)  # type: ignore[attr-defined]
    assert record.errorCode == "builtins.ConnectionError (code 111)"  # type: ignore[attr-defined]
    assert seen == ("Pending", 1)


def test_quarantined_names_entry_and_kind_and_a_last_failure_logs_no_retry(probe: Probe) -> None:
    row = OutboxEntryFactory(attempts=options().max_attempts - 1)  # this attempt is the last
    result = run(one_pass(options(), RecordingPublisher(fail=True)))
    assert (result.retried, result.quarantined) == (0, 1)
    assert probe.named("dispatch retry") == []  # it did not stay Pending: no retry to report
    ((record, _text, seen),) = probe.named("quarantined")
    assert record.levelno == logging.ERROR
    assert (record.EntryId, record.Kind) == (row.id, "MessageReceived")  # type: ignore[attr-defined]
    assert seen == ("Quarantined", options().max_attempts)


def test_job_completed_reports_the_pass_and_agrees_with_the_lines_and_the_counters(
    probe: Probe,
) -> None:
    good, bad = ChatFactory(), ChatFactory()
    OutboxEntryFactory.create_batch(3, message__chat=good)
    OutboxEntryFactory.create_batch(2, message__chat=bad)
    last = OutboxEntryFactory(message__chat=bad, attempts=options().max_attempts - 1)
    assert last.attempts > 0

    def counter(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"kind": "MessageReceived"}) or 0.0

    names = ("dispatched", "retried", "quarantined")
    before = {n: counter(f"messenger_realtime_{n}_total") for n in names}
    result = run(one_pass(options(), FailingChat(bad.id)))
    ((record, text, seen),) = probe.named("job completed")
    counts = {n: getattr(record, n) for n in names}
    assert counts == {"dispatched": 3, "retried": 2, "quarantined": 1}
    assert counts == {n: getattr(result, n) for n in names}
    assert counts == {n: len(probe.named(m)) for n, m in zip(names, LINES, strict=True)}
    after = {n: counter(f"messenger_realtime_{n}_total") - before[n] for n in names}
    assert after == counts
    assert record.levelno == logging.INFO and record.DurationMs >= 0  # type: ignore[attr-defined]
    assert seen == [("Done", 1, 3), ("Pending", 1, 2), ("Quarantined", options().max_attempts, 1)]
    assert f"DurationMs={record.DurationMs}" in text  # type: ignore[attr-defined]
