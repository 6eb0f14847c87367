"""Every `quarantined` log line says why (errorCode), whichever way the row got there."""

import logging

import pytest

from messenger_realtime.dispatch.sql import EXHAUSTED_ERROR
from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.dispatch import one_pass
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, make_due, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
LOGGER = "messenger_realtime.dispatch.outcomes"


def quarantine_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == LOGGER and r.getMessage().startswith("quarantined ")
    ]


def test_a_row_quarantined_after_failed_pushes_logs_the_last_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = OutboxEntryFactory()
    with caplog.at_level(logging.INFO, LOGGER):
        for _ in range(2):
            run(one_pass(options(max_attempts=2), RecordingPublisher(fail=True)))
            make_due(entry)
    [line] = quarantine_lines(caplog)
    assert line.__dict__["EntryId"] == entry.id
    assert line.__dict__["errorCode"] == "builtins.ConnectionError (code 111)"


def test_a_row_that_can_never_be_built_logs_its_permanent_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = OutboxEntryFactory()
    RealtimeOutboxEntry.objects.filter(id=entry.id).update(seq=entry.seq + 100)  # wrong Seq
    with caplog.at_level(logging.INFO, LOGGER):
        run(one_pass(options(), RecordingPublisher()))
    [line] = quarantine_lines(caplog)
    assert line.__dict__["errorCode"].startswith("ReferenceMismatch: ")


def test_a_row_exhausted_by_crashed_claims_logs_attempts_exhausted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    OutboxEntryFactory(exhausted=True)
    with caplog.at_level(logging.INFO, LOGGER):
        run(one_pass(options(), RecordingPublisher()))
    [line] = quarantine_lines(caplog)
    assert line.__dict__["errorCode"] == EXHAUSTED_ERROR
