"""The rules every MESSENGER_REALTIME value must meet, as a pure function.

Shared by the system checks (checks.py, one stable id per rule) and the option loaders
(settings.py), so a process never starts on a value its checks would refuse.
"""

from typing import Any

POSITIVE_DURATIONS = (
    "POLLING_INTERVAL",
    "MAX_RUN_DURATION",
    "RETENTION_DONE",
    "RETENTION_INTERVAL",
    "LOCK_TTL",
    "PUBLISH_TIMEOUT",
    "JWT_LIFETIME",
    "CONNECTION_TOKEN_TTL",
    "KEEPALIVE_INTERVAL",
    "CLIENT_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "MEDIA_TOKEN_TTL",
    "TURN_TTL",
    "BUILD_TIMEOUT",
    "HUB_BACKLOG_WAIT",
    "DISCONNECT_TIMEOUT",
    "LONG_POLL_TIMEOUT",
    "RATE_LIMIT_WINDOW",
)
# Kinds a delivery deadline may drop: never a message, a receipt or any chat state change
# (clients rebuild those from REST anyway, but a lost message event is never acceptable).
EXPIRABLE_KINDS = frozenset(
    {
        "CallInvited",
        "CallAnswered",
        "CallDeclined",
        "CallMissed",
        "CallCancelled",
        "CallEnded",
        "ConferenceInvited",
        "ConferenceStarted",
        "ConferenceEnded",
        "ConferenceParticipantJoined",
        "ConferenceParticipantLeft",
        "ScreenShareStarted",
        "ScreenShareStopped",
        "RecordingStarted",
        "RecordingStopped",
    }
)
MIN_JWT_KEY_BYTES = 32  # RFC 7518: an HS256 key at least as long as the hash
# Twisted's own write buffer threshold: a smaller bound would close healthy connections
# on a single large event.
MIN_SEND_BUFFER_LIMIT = 64 * 1024
# A replay buffer smaller than a few events would give up on healthy connections.
MIN_REPLAY_BUFFER = 16 * 1024
MAX_DISCONNECT_TIMEOUT = 300.0
TRANSPORT_NAMES = ("WebSockets", "ServerSentEvents", "LongPolling")
# Each partition's leader holds up to five database sessions, its standbys two each.
MAX_DISPATCH_PARTITIONS = 64
# A negotiate held longer than the official clients' request timeout (100 s in the
# JavaScript and .NET clients) would be abandoned by them: stay well inside it.
MAX_ADMISSION_WAIT = 60.0
# Coalescing trades latency for CPU: an event in a stream waits at most this much more.
MAX_WAKE_COALESCE = 0.1
# User content the API accepts must stay inside what the build accepts from the database
# (contracts/content.py WIRE_LIMITS, `fileMeta` one level down in its payload), so an
# accepted message is always delivered: each CONTENT_MAX_* key's upper bound.
CONTENT_BOUNDS = {
    "CONTENT_MAX_DEPTH": 16,
    "CONTENT_MAX_ENTRIES": 10_000,
    "CONTENT_MAX_KEY_LENGTH": 1_000,
    "CONTENT_MAX_STRING": 1_000_000,
}
# The official client abandons a poll after 100 s: the server must answer before.
CLIENT_POLL_TIMEOUT = 100.0
# The shortest lease (E031): three heartbeats of at least a second each.
MIN_LOCK_TTL = 3.0


# Upper bounds: a value past one is a typo (a unit slip, a stray digit), never a choice.
# (key -> (bound, why)); E027.
UPPER_BOUNDS: dict[str, tuple[float, str]] = {
    "POLLING_INTERVAL": (60.0, "seconds; the worker's safety-net poll"),
    "BATCH_SIZE": (10_000, "rows per claim"),
    "MAX_RUN_DURATION": (600.0, "seconds per pass"),
    "MAX_ATTEMPTS": (1_000, "attempts"),
    "BACKOFF_CAP": (86_400.0, "seconds"),
    "RETENTION_DONE": (30 * 86_400.0, "seconds (30 days)"),
    "RETENTION_BATCH": (100_000, "rows per delete"),
    "RETENTION_INTERVAL": (86_400.0, "seconds"),
    "PUBLISH_TIMEOUT": (300.0, "seconds"),
    "LOCK_TTL": (3_600.0, "seconds; a dead leader's rows wait this long"),
    "BUILD_TIMEOUT": (300.0, "seconds"),
    "HUB_BACKLOG_LIMIT": (1_000_000, "messages"),
    "HUB_BACKLOG_WAIT": (60.0, "seconds"),
    "JWT_LIFETIME": (30 * 86_400.0, "seconds (30 days)"),
    "CONNECTION_TOKEN_TTL": (3_600.0, "seconds; negotiate to connect takes seconds"),
    "CLIENT_TIMEOUT": (3_600.0, "seconds"),
    "HANDSHAKE_TIMEOUT": (300.0, "seconds"),
    "MAX_MESSAGE_SIZE": (16 * 1024 * 1024, "bytes"),
    "SEND_BUFFER_LIMIT": (1024 * 1024 * 1024, "bytes"),
    "STATEFUL_RECONNECT_BUFFER_SIZE": (64 * 1024 * 1024, "bytes"),
    "MEDIA_TOKEN_TTL": (86_400.0, "seconds"),
    "TURN_TTL": (86_400.0, "seconds"),
    "RATE_LIMIT_WINDOW": (86_400.0, "seconds"),
    "ADMISSION_LIMIT": (100_000, "connects in progress per hub process"),
    "RECOVERY_MAX_EVENTS": (100_000, "events per stream and recovery"),
}
# The official clients drop a connection after 30 s without a message from the server
# (serverTimeoutInMilliseconds) and expect a keep-alive at half that.
CLIENT_SERVER_TIMEOUT = 30.0


def validate(values: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(check id, key, problem) for every rule the merged values break."""
    found: list[tuple[str, str, str]] = []

    def rule(check_id: str, key: str, ok: bool, problem: str) -> None:
        if key in values and not ok:
            found.append((check_id, key, problem))

    rule("E003", "BATCH_SIZE", values.get("BATCH_SIZE", 1) > 0, "must be > 0")
    rule("E004", "MAX_ATTEMPTS", values.get("MAX_ATTEMPTS", 1) > 0, "must be > 0")
    for key in ("BACKOFF_BASE", "BACKOFF_CAP"):
        rule("E005", key, values.get(key, 1) > 0, "must be > 0")
    rule("E005", "BACKOFF_FACTOR", values.get("BACKOFF_FACTOR", 1) >= 1, "must be >= 1.0")
    base, cap = values.get("BACKOFF_BASE", 0), values.get("BACKOFF_CAP", 0)
    rule("E006", "BACKOFF_CAP", base <= 0 or cap <= 0 or cap >= base, "must be >= BACKOFF_BASE")
    for key in POSITIVE_DURATIONS:
        rule("E007", key, values.get(key, 1) > 0, "must be > 0 seconds")
    jitter = values.get("BACKOFF_JITTER", 0)
    rule("E008", "BACKOFF_JITTER", 0 <= jitter < 1, "must be in [0, 1)")
    rule("E009", "LOCK_KEY", bool(str(values.get("LOCK_KEY", "x")).strip()), "must not be empty")
    rule("E010", "RETENTION_BATCH", values.get("RETENTION_BATCH", 1) > 0, "must be > 0")
    rule("E010", "MAX_MESSAGE_SIZE", values.get("MAX_MESSAGE_SIZE", 1) > 0, "must be > 0")
    port = values.get("METRICS_PORT", 0)
    rule("E010", "METRICS_PORT", 0 <= port <= 65535, "must be 0 (off) or a TCP port")
    rule("E010", "HUB_BACKLOG_LIMIT", values.get("HUB_BACKLOG_LIMIT", 1) > 0, "must be > 0")
    deadlines = values.get("DELIVERY_DEADLINES", {})
    unknown = sorted(set(deadlines) - EXPIRABLE_KINDS)
    rule(
        "E015",
        "DELIVERY_DEADLINES",
        not unknown,
        f"names kinds that may not expire: {', '.join(unknown)} (only media kinds may)",
    )
    rule(
        "E015",
        "DELIVERY_DEADLINES",
        all(seconds > 0 for seconds in deadlines.values()),
        "deadlines must be > 0 seconds",
    )
    for secret in ("JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET"):
        key = str(values.get(secret, "x" * MIN_JWT_KEY_BYTES))
        ok = len(key.encode()) >= MIN_JWT_KEY_BYTES
        rule("E012", secret, ok, f"must be set, at least {MIN_JWT_KEY_BYTES} bytes")
    sample = values.get("DISPATCHED_LOG_SAMPLE", 1)
    rule("E016", "DISPATCHED_LOG_SAMPLE", 0 <= sample <= 1, "must be in [0, 1]")
    urls = [str(u) for u in values.get("ICE_SERVERS", [])]
    ok = all(u.startswith(("stun:", "turn:", "turns:")) for u in urls)
    rule("E014", "ICE_SERVERS", ok, "every entry must be a stun:, turn: or turns: URL")
    limit = values.get("SEND_BUFFER_LIMIT", MIN_SEND_BUFFER_LIMIT)
    ok = limit >= MIN_SEND_BUFFER_LIMIT
    rule("E017", "SEND_BUFFER_LIMIT", ok, f"must be at least {MIN_SEND_BUFFER_LIMIT} bytes")
    partitions = values.get("DISPATCH_PARTITIONS", 1)
    ok = 1 <= partitions <= MAX_DISPATCH_PARTITIONS
    rule("E022", "DISPATCH_PARTITIONS", ok, f"must be in [1, {MAX_DISPATCH_PARTITIONS}]")
    window = values.get("WAKE_COALESCE", 0)
    ok = 0 <= window <= MAX_WAKE_COALESCE
    rule("E023", "WAKE_COALESCE", ok, f"must be in [0, {MAX_WAKE_COALESCE}] seconds (0: off)")
    for key, bound in CONTENT_BOUNDS.items():
        ok = 1 <= values.get(key, 1) <= bound
        rule("E025", key, ok, f"must be in [1, {bound}]")
    for key in ("RATE_LIMIT_WRITES", "RATE_LIMIT_INVOCATIONS"):
        rule("E026", key, values.get(key, 0) >= 0, "must be >= 0 (0: no limit)")
    rule("E026", "RATE_LIMIT_FLOOD", values.get("RATE_LIMIT_FLOOD", 1) >= 1, "must be >= 1")
    rule("E029", "ADMISSION_LIMIT", values.get("ADMISSION_LIMIT", 1) >= 1, "must be >= 1")
    wait = values.get("ADMISSION_WAIT", 0)
    ok = 0 <= wait <= MAX_ADMISSION_WAIT
    rule("E029", "ADMISSION_WAIT", ok, f"must be in [0, {MAX_ADMISSION_WAIT:g}] seconds (0: none)")
    most = values.get("RECOVERY_MAX_EVENTS", 1)
    rule("E030", "RECOVERY_MAX_EVENTS", most >= 1, "must be >= 1")
    url = str(values.get("RATE_LIMIT_REDIS_URL", ""))
    ok = not url or url.startswith(("redis://", "rediss://", "unix://"))
    rule(
        "E026", "RATE_LIMIT_REDIS_URL", ok, "must be empty or a redis://, rediss:// or unix:// URL"
    )
    for key, (most, unit) in UPPER_BOUNDS.items():
        rule("E027", key, values.get(key, 0) <= most, f"must be at most {most:g} ({unit})")
    keepalive = values.get("KEEPALIVE_INTERVAL", 1)
    ok = keepalive <= CLIENT_SERVER_TIMEOUT / 2
    problem = (
        f"must be at most {CLIENT_SERVER_TIMEOUT / 2:g} s: the official clients close a "
        f"connection that hears nothing for {CLIENT_SERVER_TIMEOUT:g} s"
    )
    rule("E028", "KEEPALIVE_INTERVAL", ok, problem)
    timeout = values.get("CLIENT_TIMEOUT", CLIENT_SERVER_TIMEOUT)
    ok = timeout <= 0 or keepalive < timeout  # (a non-positive one is E007's)
    rule("E028", "CLIENT_TIMEOUT", ok, "must be longer than KEEPALIVE_INTERVAL")
    # The lease against its own heartbeat: the leader stamps every LOCK_TTL/3, and the
    # lease session's idle-in-transaction limit is LOCK_TTL/3 but at least 1 s
    # (docs/dispatcher.md, The lease), so a shorter lease would be ended by a standby
    # between two heartbeats of a healthy leader, or outlive a frozen one's transaction.
    ttl = values.get("LOCK_TTL", MIN_LOCK_TTL)
    ok = ttl <= 0 or ttl >= MIN_LOCK_TTL  # (a non-positive one is E007's)
    problem = (
        f"must be at least {MIN_LOCK_TTL:g} s: the leader's heartbeat runs every third of "
        "it, and the lease session's idle-in-transaction limit is at least 1 s"
    )
    rule("E031", "LOCK_TTL", ok, problem)
    _hub_transport_rules(values, rule)
    return found


def _hub_transport_rules(values: dict[str, Any], rule: Any) -> None:
    """E018-E021: stateful reconnect's bounds, long polling's timeout, the transports."""
    replay = values.get("STATEFUL_RECONNECT_BUFFER_SIZE", 0)
    ok = replay == 0 or replay >= MIN_REPLAY_BUFFER
    problem = f"must be 0 (stateful reconnect off) or at least {MIN_REPLAY_BUFFER} bytes"
    rule("E018", "STATEFUL_RECONNECT_BUFFER_SIZE", ok, problem)
    # A connection without its transport holds its buffer, its groups and its tasks;
    # clients come back within seconds (a resume is immediate, polls are back to back).
    window = values.get("DISCONNECT_TIMEOUT", 0)
    ok = window <= MAX_DISCONNECT_TIMEOUT
    rule("E019", "DISCONNECT_TIMEOUT", ok, f"must be at most {MAX_DISCONNECT_TIMEOUT:.0f} s")
    poll = values.get("LONG_POLL_TIMEOUT", 1)
    problem = f"must be below {CLIENT_POLL_TIMEOUT:.0f} s (the client's own poll timeout)"
    rule("E020", "LONG_POLL_TIMEOUT", poll < CLIENT_POLL_TIMEOUT, problem)
    names = values.get("TRANSPORTS", list(TRANSPORT_NAMES))
    ok = bool(names) and all(name in TRANSPORT_NAMES for name in names)
    rule("E021", "TRANSPORTS", ok, f"must name at least one of {', '.join(TRANSPORT_NAMES)}")
