"""The app's settings, read in one place and cached per process.

Source order: built-in defaults (the spec's), then `settings.MESSENGER_REALTIME`, then the
environment (`MESSENGER_REALTIME_<KEY>`, and the spec's `REALTIME_BACKPLANE_ENABLED`).
Durations are seconds (int, float or timedelta).

Each process role reads and validates only its own keys: the worker its
RealtimeDispatchOptions, the hub (Daphne) its HubOptions, both the DOMAIN_PORT. So a bad
hub-only secret never stops the worker, and the reverse. The loaded options are cached
(the hub reads them on every connect) and the cache is cleared when Django's
`setting_changed` fires for MESSENGER_REALTIME (tests) or by `clear_cache()`.
Problems are reported by the system checks in checks.py (rules in validation.py);
the loaders refuse to build options from invalid settings.
"""

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import environ
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from messenger_realtime.conf.numbers import parse_number

DEFAULTS: dict[str, Any] = {
    "POLLING_INTERVAL": 1.0,
    "BATCH_SIZE": 200,
    "MAX_RUN_DURATION": 5.0,
    "MAX_ATTEMPTS": 8,
    "BACKOFF_BASE": 2.0,
    "BACKOFF_FACTOR": 2.0,
    "BACKOFF_CAP": 120.0,
    "BACKOFF_JITTER": 0.2,  # a retry is scheduled up to this fraction earlier than the cap
    "RETENTION_DONE": 24 * 3600.0,
    "RETENTION_BATCH": 1000,
    "RETENTION_INTERVAL": 60.0,
    "PUBLISH_TIMEOUT": 5.0,  # a push not accepted by then counts as a transient failure
    "LOCK_TTL": 30.0,
    "LOCK_KEY": "job:scheduled:messenger-realtime-dispatch",
    "REALTIME_BACKPLANE_ENABLED": True,
    "METRICS_PORT": 9108,  # the worker's /metrics and /health/*; 0 turns it off
    "BUILD_TIMEOUT": 5.0,  # a batch's domain read not done by then: its rows retried alone
    # Seconds after which a time-critical event is not pushed any more (kind -> seconds).
    "DELIVERY_DEADLINES": {
        "CallInvited": 45.0,
        "ConferenceInvited": 300.0,
        "ConferenceStarted": 300.0,
    },
    "HUB_BACKLOG_LIMIT": 200,  # messages queued for one hub process before pushes wait
    "HUB_BACKLOG_WAIT": 1.0,  # the longest a push waits for a hub to catch up
    "DISPATCHED_LOG_SAMPLE": 1.0,  # share of Done rows logged as `dispatched` (0 = none)
    "DISPATCH_PARTITIONS": 1,  # K > 1: K leaders, each for the targets hashing to it
    "WAKE_COALESCE": 0.02,  # a stream's NOTIFY waits this long to share a pass (wakes.py)
    # The hub (/hubs/messenger) and the host's domain port.
    "DOMAIN_PORT": "",  # dotted path of the host's DomainPort implementation
    "JWT_SIGNING_KEY": "",  # HS256 key; a secret: never logged
    "JWT_ISSUER": "messenger",
    "JWT_AUDIENCE": "messenger-realtime",
    "JWT_LIFETIME": 3600.0,  # tokens minted by `manage.py realtime_token`
    "CORS_ALLOWED_ORIGINS": [],
    "CONNECTION_TOKEN_TTL": 300.0,  # negotiate -> WebSocket connect
    "KEEPALIVE_INTERVAL": 15.0,  # ping after this long without sending
    "CLIENT_TIMEOUT": 30.0,  # close after this long without hearing from the client
    "HANDSHAKE_TIMEOUT": 15.0,
    "MAX_MESSAGE_SIZE": 32 * 1024,  # bytes per client message, as ASP.NET's default
    # Unsent bytes a connection may have queued (Daphne's buffer plus the socket's
    # unacknowledged bytes) before it is closed with allowReconnect: a client that
    # stops reading costs at most this much memory.
    "SEND_BUFFER_LIMIT": 1024 * 1024,
    # Stateful reconnect: unacked bytes kept per connection for a resume (0: not offered).
    "STATEFUL_RECONNECT_BUFFER_SIZE": 100_000,
    # How long a connection without its transport is kept: a dropped stateful
    # WebSocket awaiting its resume, a long-polling connection between polls.
    "DISCONNECT_TIMEOUT": 15.0,
    # Transports negotiate offers, in this order (docs/hub.md).
    "TRANSPORTS": ["WebSockets", "ServerSentEvents", "LongPolling"],
    "LONG_POLL_TIMEOUT": 90.0,  # a poll with nothing to deliver is answered empty after this
    # Media credentials minted at delivery (messenger_realtime/media.py); secrets.
    "MEDIA_JWT_SIGNING_KEY": "",
    "MEDIA_JWT_ISSUER": "messenger",
    "MEDIA_JWT_AUDIENCE": "media",
    "MEDIA_TOKEN_TTL": 300.0,
    "TURN_SHARED_SECRET": "",
    "TURN_TTL": 600.0,
    "ICE_SERVERS": ["stun:127.0.0.1:3478", "turn:127.0.0.1:3478?transport=udp"],
    # User content the REST API accepts (contracts/content.py, docs/api.md): levels of
    # nesting in `fileMeta`, keys per object or items per array, characters of a key and
    # of any string (a message body, a card's text, a string inside `fileMeta`).
    "CONTENT_MAX_DEPTH": 8,
    "CONTENT_MAX_ENTRIES": 100,
    "CONTENT_MAX_KEY_LENGTH": 128,
    "CONTENT_MAX_STRING": 10_000,
    # Per-user rate limits (hub/ratelimit.py): REST writes and hub invocations per
    # RATE_LIMIT_WINDOW seconds (0: no limit), counted in the Redis at
    # RATE_LIMIT_REDIS_URL ("": not counted); a connection that keeps invoking past its
    # limit is closed after RATE_LIMIT_FLOOD refusals.
    "RATE_LIMIT_WINDOW": 60.0,
    "RATE_LIMIT_WRITES": 600,
    "RATE_LIMIT_INVOCATIONS": 600,
    "RATE_LIMIT_FLOOD": 20,
    "RATE_LIMIT_REDIS_URL": "",
    # Connects in progress in one hub process (negotiated or upgraded, not yet through
    # their handshake) past which a negotiate waits in line, up to ADMISSION_WAIT
    # seconds (0: not at all), then answers 503 with Retry-After (hub/admission.py): a
    # reconnect storm is admitted at the process's full rate, not timed out.
    "ADMISSION_LIMIT": 200,
    "ADMISSION_WAIT": 30.0,
    # The most events one stream's recovery sends (hub/recovery.py): a client further
    # behind is told to resync over REST.
    "RECOVERY_MAX_EVENTS": 1000,
}
_KINDS: dict[str, type] = {
    "BATCH_SIZE": int,
    "MAX_ATTEMPTS": int,
    "RETENTION_BATCH": int,
    "LOCK_KEY": str,
    "REALTIME_BACKPLANE_ENABLED": bool,
    "DOMAIN_PORT": str,
    "JWT_SIGNING_KEY": str,
    "JWT_ISSUER": str,
    "JWT_AUDIENCE": str,
    "CORS_ALLOWED_ORIGINS": list,
    "MAX_MESSAGE_SIZE": int,
    "SEND_BUFFER_LIMIT": int,
    "STATEFUL_RECONNECT_BUFFER_SIZE": int,
    "TRANSPORTS": list,
    "METRICS_PORT": int,
    "DELIVERY_DEADLINES": dict,
    "HUB_BACKLOG_LIMIT": int,
    "DISPATCH_PARTITIONS": int,
    "MEDIA_JWT_SIGNING_KEY": str,
    "MEDIA_JWT_ISSUER": str,
    "MEDIA_JWT_AUDIENCE": str,
    "TURN_SHARED_SECRET": str,
    "ICE_SERVERS": list,
    "CONTENT_MAX_DEPTH": int,
    "CONTENT_MAX_ENTRIES": int,
    "CONTENT_MAX_KEY_LENGTH": int,
    "CONTENT_MAX_STRING": int,
    "RATE_LIMIT_WRITES": int,
    "RATE_LIMIT_INVOCATIONS": int,
    "RATE_LIMIT_FLOOD": int,
    "RATE_LIMIT_REDIS_URL": str,
    "ADMISSION_LIMIT": int,
    "RECOVERY_MAX_EVENTS": int,
}  # every other key is a float (a duration in seconds, a factor or a fraction)
ENV_PREFIX = "MESSENGER_REALTIME_"
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off"}


@dataclass(frozen=True)
class RealtimeDispatchOptions:
    polling_interval: float
    batch_size: int
    max_run_duration: float
    max_attempts: int
    backoff_base: float
    backoff_factor: float
    backoff_cap: float
    backoff_jitter: float
    retention_done: float
    retention_batch: int
    retention_interval: float
    publish_timeout: float
    lock_ttl: float
    lock_key: str
    realtime_backplane_enabled: bool
    metrics_port: int
    build_timeout: float
    delivery_deadlines: dict[str, float]
    hub_backlog_limit: int
    hub_backlog_wait: float
    dispatched_log_sample: float = 1.0
    dispatch_partitions: int = 1
    wake_coalesce: float = 0.02


@dataclass(frozen=True)
class HubOptions:
    domain_port: str
    jwt_signing_key: str = dataclasses.field(repr=False)
    jwt_issuer: str
    jwt_audience: str
    jwt_lifetime: float
    cors_allowed_origins: list[str]
    connection_token_ttl: float
    keepalive_interval: float
    client_timeout: float
    handshake_timeout: float
    max_message_size: int
    send_buffer_limit: int
    stateful_reconnect_buffer_size: int
    disconnect_timeout: float
    transports: list[str]
    long_poll_timeout: float
    media_jwt_signing_key: str = dataclasses.field(repr=False)
    media_jwt_issuer: str
    media_jwt_audience: str
    media_token_ttl: float
    turn_shared_secret: str = dataclasses.field(repr=False)
    turn_ttl: float
    ice_servers: list[str]
    content_max_depth: int = 8
    content_max_entries: int = 100
    content_max_key_length: int = 128
    content_max_string: int = 10_000
    rate_limit_window: float = 60.0
    rate_limit_writes: int = 600
    rate_limit_invocations: int = 600
    rate_limit_flood: int = 20
    rate_limit_redis_url: str = ""
    admission_limit: int = 200
    admission_wait: float = 30.0
    recovery_max_events: int = 1000


def env_name(key: str) -> str:
    """The environment variable that overrides a key."""
    return key if key == "REALTIME_BACKPLANE_ENABLED" else ENV_PREFIX + key


def _coerce(key: str, value: Any) -> Any:
    kind = _KINDS.get(key, float)
    if isinstance(value, str) and kind is bool:
        # Strict: a typo such as "ture" must not silently read as False.
        if value.strip().lower() not in _BOOL_WORDS:
            raise ValueError(f"not a boolean (use one of {sorted(_BOOL_WORDS)})")
        return value.strip().lower() in environ.Env.BOOLEAN_TRUE_STRINGS
    if kind is dict:
        return _deadlines(value)
    if kind is list:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise TypeError("expected a list of strings")
        return list(value)
    if isinstance(value, str) and kind in (int, float):
        value = parse_number(value, kind)
    if kind is float and isinstance(value, timedelta):
        return value.total_seconds()
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _deadlines(value: Any) -> dict[str, float]:
    """{kind: seconds}, from a mapping or "Kind=seconds,Kind=seconds" (the environment)."""
    if isinstance(value, str):
        pairs = [item.partition("=") for item in value.split(",") if item.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError("expected Kind=seconds pairs separated by commas")
        value = {k.strip(): v.strip() for k, _, v in pairs}
    if not isinstance(value, dict):
        raise TypeError("expected a mapping of kind to seconds")
    return {str(k): float(v) for k, v in value.items()}


def collect() -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Merged raw values plus (key, problem) pairs for unknown or unparsable keys."""
    configured = getattr(settings, "MESSENGER_REALTIME", {}) or {}
    problems = [(key, "unknown key") for key in configured if key not in DEFAULTS]
    values: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        raw = os.environ.get(env_name(key), configured.get(key, default))
        try:
            values[key] = _coerce(key, raw)
        except (TypeError, ValueError) as exc:
            problems.append((key, f"invalid value {raw!r}: {exc}"))
    return values, problems


WORKER = "worker"
HUB = "hub"


def role_keys(role: str) -> frozenset[str]:
    """The keys a process role reads (and so validates): its options plus DOMAIN_PORT."""
    cls = RealtimeDispatchOptions if role == WORKER else HubOptions
    return frozenset({f.name.upper() for f in dataclasses.fields(cls)} | {"DOMAIN_PORT"})


def _validated(keys: frozenset[str], overrides: dict[str, Any]) -> dict[str, Any]:
    from messenger_realtime.conf.validation import validate

    values, problems = collect()
    values.update({k.upper(): v for k, v in overrides.items()})
    # A key no role reads is a typo: every role refuses to start on it.
    errors = [
        f"{key}: {problem}" for key, problem in problems if key in keys or key not in DEFAULTS
    ]
    errors += [f"{key}: {problem}" for _id, key, problem in validate(values) if key in keys]
    if errors:
        raise ImproperlyConfigured("MESSENGER_REALTIME " + "; ".join(errors))
    return {k.lower(): v for k, v in values.items()}


def _build(cls: type[Any], values: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@functools.cache
def _cached(role: str) -> Any:
    cls = RealtimeDispatchOptions if role == WORKER else HubOptions
    return _build(cls, _validated(role_keys(role), {}))


def load_options(**overrides: Any) -> RealtimeDispatchOptions:
    """The worker's validated options (cached; overrides give a fresh copy, for tests).

    Raises ImproperlyConfigured naming every bad worker key.
    """
    if overrides:
        options: RealtimeDispatchOptions = _build(
            RealtimeDispatchOptions, _validated(role_keys(WORKER), overrides)
        )
        return options
    cached: RealtimeDispatchOptions = _cached(WORKER)
    return cached


def load_hub_options(**overrides: Any) -> HubOptions:
    """The hub's validated options (cached; overrides give a fresh copy, for tests).

    Raises ImproperlyConfigured naming every bad hub key.
    """
    if overrides:
        options: HubOptions = _build(HubOptions, _validated(role_keys(HUB), overrides))
        return options
    cached: HubOptions = _cached(HUB)
    return cached


def domain_port_path() -> str:
    """The validated dotted path of the host's DomainPort (both roles read it)."""
    return str(_validated(frozenset({"DOMAIN_PORT"}), {})["domain_port"])


def clear_cache() -> None:
    """Forget the loaded options (after settings or the environment changed)."""
    _cached.cache_clear()
