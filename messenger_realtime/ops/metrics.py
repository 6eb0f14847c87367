"""The spec's metrics, in one place (prometheus_client; labels stay bounded: kind only).

Each process exports only its own families (ops/exposition.py): the worker the dispatch
families on its own port (ops/health.py), Daphne the hub's (WEB_FAMILIES, below) and
django-prometheus' request metrics at /metrics.
"""

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

# Dense around the 1 s persist->push SLO.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0, 60.0)
# Commit -> client: finer where a healthy system lives (tens of ms), so a quantile read off
# the buckets is within a few ms of the clients' own figure (bench/e2e.py --acknowledge).
DELIVERY_BUCKETS = (
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0,
    10.0, 30.0, 60.0,
)  # fmt: skip

pending = Gauge("messenger_realtime_pending", "Outbox rows in status Pending (backlog).")
oldest_pending_age = Gauge(
    "messenger_realtime_oldest_pending_age_seconds", "Age of the oldest Pending row (0 if none)."
)
retention_deleted = Counter(
    "messenger_realtime_retention_deleted",
    "Done rows deleted by retention (rate(): its rows per second).",
)
retention_behind = Gauge(
    "messenger_realtime_retention_behind_seconds",
    "How far retention is behind: seconds the oldest Done row is past RETENTION_DONE "
    "(0 when caught up).",
)
quarantined_rows = Gauge(
    "messenger_realtime_quarantined_rows",
    "Outbox rows in status Quarantined now, per kind (refreshed with the pending gauge).",
    ["kind"],
)
_quarantined_kinds: set[str] = set()  # every kind's series exists, so each can go back to 0
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
partition_leading = Gauge(
    "messenger_realtime_partition_leading",
    "1 for each partition this worker leads, 0 once it stops (DISPATCH_PARTITIONS > 1).",
    ["partition"],
)
channel_overruns = Counter(
    "messenger_realtime_channel_overruns",
    "Messages dropped at a full hub process queue (one per process queue) or connection "
    "inbox (one per connection); each connection that lost one is closed.",
)
expired = Counter(
    "messenger_realtime_expired",
    "Time-critical rows not pushed because they outlived their delivery deadline.",
    ["kind"],
)
build_timeouts = Counter(
    "messenger_realtime_build_timeouts",
    "Domain reads abandoned after BUILD_TIMEOUT (their batch's rows were retried alone).",
)
backpressure_waits = Counter(
    "messenger_realtime_backpressure_waits",
    "Pushes that waited for a hub process's queue to drain below HUB_BACKLOG_LIMIT.",
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
# Waits on the network (ops/network.py): a silent peer, seen while it lasts and once noticed.
network_wait = Gauge(
    "messenger_realtime_network_wait_seconds",
    "How long this process's oldest wait on a dependency (postgresql, redis) has gone "
    "without its reply, past what it may take (a blocking receive's own wait); 0 while "
    "nothing waits. Past 2 x NETWORK_TIMEOUT the process is wedged: /health/live is 503.",
    ["dependency"],
)
network_timeouts = Counter(
    "messenger_realtime_network_timeouts",
    "Connections to a dependency (postgresql, redis) dropped and made again because their "
    "peer stayed silent for NETWORK_TIMEOUT (a lost flow, a failover, a partition).",
    ["dependency"],
)
hub_connections = Gauge("messenger_realtime_hub_connections", "Open hub connections.")
hub_disconnects = Counter("messenger_realtime_hub_disconnects", "Closed hub connections.")
hub_forced_closes = Counter(
    "messenger_realtime_hub_forced_closes",
    "Hub connections the server closed, by reason: with allowReconnect, expired (token or "
    "session), send_buffer (over SEND_BUFFER_LIMIT), overrun (events were dropped), "
    "backplane_restart (a Redis server forgot the process's groups and queue), "
    "replay_buffer (a dropped stateful connection's unacked events passed "
    "STATEFUL_RECONNECT_BUFFER_SIZE), recovery (an event held for a Recover could not be "
    "checked at its release: a failed membership read); without, logout (its Django "
    "session ended), revoked "
    "(its user deactivated, deleted or logged out everywhere), flood (refused "
    "RATE_LIMIT_FLOOD times for its budget or its user's rate limit).",
    ["reason"],
)
hub_resumes = Counter(
    "messenger_realtime_hub_resumes",
    "Stateful reconnect resumes of a connection this process holds, by outcome: resumed, "
    "refused (another user, ended, or past its buffer).",
    ["outcome"],
)
hub_rate_limited = Counter(
    "messenger_realtime_hub_rate_limited",
    "Requests refused for a user's rate limit, by scope: rest (REST writes, answered 429), "
    "hub (hub invocations, answered with an error), connect (negotiates and upgrades), "
    "budget (a connection's messages past its INVOCATION_BUDGET).",
    ["scope"],
)

hub_typing = Counter(
    "messenger_realtime_hub_typing",
    "Typing indicators (hub/connection/composing.py), by outcome: published (a Typing "
    "call sent one to its chat), collapsed (a call within TYPING_INTERVAL of the last "
    "publish: nothing sent), shown (sent to a connection), dropped (a connection had "
    "something waiting to reach its client: typing goes first).",
    ["outcome"],
)

hub_connects_shed = Counter(
    "messenger_realtime_hub_connects_shed",
    "Negotiate requests answered 503 with Retry-After because ADMISSION_LIMIT connects "
    "stayed in progress in the process for all of ADMISSION_WAIT (admission control; the "
    "clients retry).",
)
hub_connects_waiting = Gauge(
    "messenger_realtime_hub_connects_waiting",
    "Negotiate requests waiting in line for one of the process's ADMISSION_LIMIT connects "
    "in progress to finish (admission control).",
)
hub_recoveries = Counter(
    "messenger_realtime_hub_recoveries",
    "Streams a Recover invocation asked for, by outcome: recovered (every missed event "
    "sent), resync (too far behind, past retention, or not buildable: the client resyncs "
    "over REST), forbidden (the user may not read the stream now).",
    ["outcome"],
)
hub_recovered_events = Counter(
    "messenger_realtime_hub_recovered_events",
    "Events a Recover invocation sent from the database (missed while away).",
)
hub_delivery = Histogram(
    "messenger_realtime_hub_delivery_seconds",
    "From an event's commit (its row's created_at, the database's clock) to its frame "
    "handed to the connection's transport by this hub process, for live events, by event "
    "and transport: the server's own measure of the spec's SLO, which no client can move "
    "(alert RealtimeDeliverySLOBreached; hub/delivery_slo.py).",
    ["kind", "transport"],
    buckets=DELIVERY_BUCKETS,
)
client_delivery = Histogram(
    "messenger_realtime_hub_client_delivery_seconds",
    "From an event's commit to the client's acknowledgement of it, for live events to "
    "clients that acknowledge (stateful reconnect's Acks, the web client's Acknowledge), "
    "by event and transport: a second signal, told by clients, so bounded (acknowledged "
    "within 10 s of the send, at most 8 observations per user, process and minute; "
    "hub/delivery_slo.py). The hub's clock is corrected by its measured offset from the "
    "database's (messenger_realtime_hub_database_clock_offset_seconds).",
    ["kind", "transport"],
    buckets=DELIVERY_BUCKETS,
)
client_delivery_unmeasured = Counter(
    "messenger_realtime_hub_client_delivery_unmeasured",
    "Acknowledged live events left out of messenger_realtime_hub_client_delivery_seconds, "
    "by reason: late (acknowledged over 10 s after the send), share (their user had added "
    "their 8 observations of the minute on this process).",
    ["reason"],
)
client_delivery_users = Counter(
    "messenger_realtime_hub_client_delivery_users",
    "User-minutes of acknowledged deliveries on this process, by outcome: measured (the "
    "user's first observation of the minute), slow (their first over 1 s in the minute). "
    "A user adds at most one of each a minute: alert RealtimeClientDeliverySLOBreached "
    "needs 20 slow ones in five minutes, so one client alone never fires it.",
    ["outcome"],
)
database_clock_offset = Gauge(
    "messenger_realtime_hub_database_clock_offset_seconds",
    "The database's clock minus this hub process's, as last measured (a SELECT of "
    "clock_timestamp() between two readings of the process's clock, the round trip "
    "halved); client delivery latencies are corrected by it.",
)
database_clock_uncertainty = Gauge(
    "messenger_realtime_hub_database_clock_uncertainty_seconds",
    "How far the measured database clock offset may be off: half the round trip of the "
    "measurement that gave it.",
)
hub_recovery_duration = Histogram(
    "messenger_realtime_hub_recovery_duration_seconds",
    "Time of one Recover invocation: the database read, the build and the sends.",
    buckets=STAGE_BUCKETS,
)


def create_kind_series(kinds: Iterable[str]) -> None:
    """Create every kind's series at 0 (the worker calls it at start), so the first
    increment is an increase that rate()/increase() can see: a series born at 1 would
    hide the first quarantine."""
    for kind in kinds:
        for counter in (dispatched, retried, quarantined, expired):
            counter.labels(kind=kind)
        quarantined_rows.labels(kind=kind)
        _quarantined_kinds.add(kind)


def set_quarantined_rows(counts: dict[str, int]) -> None:
    """Set the current Quarantined rows per kind; kinds not in `counts` read 0."""
    _quarantined_kinds.update(counts)
    for kind in _quarantined_kinds:
        quarantined_rows.labels(kind=kind).set(counts.get(kind, 0))


def clear_leader_gauges() -> None:
    """Zero the gauges only the leader refreshes, when it stops leading: alerts take the
    max over replicas, so a former leader must not keep exporting its last backlog."""
    pending.set(0)
    oldest_pending_age.set(0)
    set_quarantined_rows({})


# The families the web process (Daphne) exports; the worker exports every other family of
# this module (ops/exposition.py), so a family added above is the worker's unless listed.
WEB_FAMILIES = (
    hub_connections,
    hub_disconnects,
    hub_forced_closes,
    hub_resumes,
    hub_rate_limited,
    hub_connects_shed,
    hub_connects_waiting,
    hub_recoveries,
    hub_recovered_events,
    hub_recovery_duration,
    hub_typing,
    hub_delivery,
    client_delivery,
    client_delivery_unmeasured,
    client_delivery_users,
    database_clock_offset,
    database_clock_uncertainty,
)
# Counted by both: the worker's pushes drop at a full channel, Daphne's connections
# overflow their in-process buffers; a query sums the two jobs.
# Each process also exports its own waits on the network.
SHARED_FAMILIES = (channel_overruns, network_wait, network_timeouts)
