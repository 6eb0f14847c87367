"""The spec's metrics, in one place (prometheus_client; labels stay bounded: kind only).

Each process exports only its own families (ops/exposition.py): the worker the dispatch
families on its own port (ops/health.py), Daphne the hub's (WEB_FAMILIES, below) and
django-prometheus' request metrics at /metrics.
"""

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

# Dense around the 1 s persist->push SLO.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0, 60.0)

pending = Gauge("messenger_realtime_pending", "Outbox rows in status Pending (backlog).")
oldest_pending_age = Gauge(
    "messenger_realtime_oldest_pending_age_seconds", "Age of the oldest Pending row (0 if none)."
)
lag = Histogram(
    "messenger_realtime_lag_seconds",
    "now - created_at when a row is marked Done (persist -> push).",
    buckets=LAG_BUCKETS,
)
dispatched = Counter("messenger_realtime_dispatched", "Rows pushed and marked Done.", ["kind"])
retried = Counter(
    "messenger_realtime_retried", "Rows that failed and stay Pending for a retry.", ["kind"]
)
quarantined = Counter(
    "messenger_realtime_quarantined", "Rows moved to Quarantined by the worker.", ["kind"]
)
last_pass = Gauge(
    "messenger_realtime_last_pass_timestamp_seconds",
    "Unix time of the last completed dispatch pass (0 while standing by).",
)
channel_overruns = Counter(
    "messenger_realtime_channel_overruns",
    "Messages channels-redis dropped because a connection's queue was full (capacity).",
)
# One claim statement / one batch's build (the domain reads): what a pass spends its time on.
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
claim_duration = Histogram(
    "messenger_realtime_claim_duration_seconds",
    "Time of one claim statement (up to BATCH_SIZE rows).",
    buckets=STAGE_BUCKETS,
)
build_duration = Histogram(
    "messenger_realtime_build_duration_seconds",
    "Time to build one batch's events (the domain reads).",
    buckets=STAGE_BUCKETS,
)
hub_connections = Gauge("messenger_realtime_hub_connections", "Open hub connections.")
hub_disconnects = Counter("messenger_realtime_hub_disconnects", "Closed hub connections.")


def create_kind_series(kinds: Iterable[str]) -> None:
    """Create every kind's series at 0 (the worker calls it at start), so the first
    increment is an increase that rate()/increase() can see: a series born at 1 would
    hide the first quarantine."""
    for kind in kinds:
        for counter in (dispatched, retried, quarantined):
            counter.labels(kind=kind)


# The families the web process (Daphne) exports; the worker exports every other family of
# this module (ops/exposition.py), so a family added above is the worker's unless listed.
WEB_FAMILIES = (hub_connections, hub_disconnects)
