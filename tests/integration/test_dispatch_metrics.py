"""The lag histogram observes now - created_at at Done, row by row (not just a count)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from prometheus_client import REGISTRY

from messenger_realtime.ops import metrics
from tests.support.dispatch import one_pass
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
AGES = (2.5, 20.0)  # seconds between each row's created_at and the pass


def lag_sample(suffix: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"messenger_realtime_lag_seconds{suffix}", labels) or 0.0


def db_ages(ids: list[object]) -> list[float]:
    """Each row's now() - created_at on the database clock, in seconds."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM now() - created_at)::float8"
            " FROM messenger.realtime_outbox WHERE id = ANY(%s::uuid[])",
            [ids],
        )
        return [age for (age,) in cur.fetchall()]


def test_lag_is_now_minus_created_at_when_each_row_becomes_done() -> None:
    rows = [OutboxEntryFactory(created_at=Now() - timedelta(seconds=age)) for age in AGES]
    ids = [row.id for row in rows]
    buckets = ("2.0", "5.0", "10.0", "30.0", "+Inf")
    before = {le: lag_sample("_bucket", le=le) for le in buckets}
    count, total = lag_sample("_count"), lag_sample("_sum")
    low = sum(db_ages(ids))
    result = run(one_pass(options(), RecordingPublisher()))
    high = sum(db_ages(ids))
    assert result.dispatched == 2
    assert lag_sample("_count") - count == 2
    # The observed sum lies between the rows' ages just before and just after the pass.
    assert low <= lag_sample("_sum") - total <= high
    # 2.5 s falls in (2, 5], 20 s in (10, 30]: the buckets place each row by its own age.
    got = {le: lag_sample("_bucket", le=le) - before[le] for le in buckets}
    assert got == {"2.0": 0, "5.0": 1, "10.0": 1, "30.0": 2, "+Inf": 2}


def test_quarantined_rows_gauge_zeroes_kinds_that_have_none_left() -> None:
    metrics.set_quarantined_rows({"MessageReceived": 3, "CallInvited": 1})
    metrics.set_quarantined_rows({"CallInvited": 2})
    value = REGISTRY.get_sample_value
    assert value("messenger_realtime_quarantined_rows", {"kind": "MessageReceived"}) == 0
    assert value("messenger_realtime_quarantined_rows", {"kind": "CallInvited"}) == 2
    metrics.clear_leader_gauges()
    assert value("messenger_realtime_quarantined_rows", {"kind": "CallInvited"}) == 0
