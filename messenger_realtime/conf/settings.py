"""The app's settings, read in one place and cached per process.

Source order: built-in defaults (the spec's), then `settings.MESSENGER_REALTIME`, then the
environment (`MESSENGER_REALTIME_<KEY>`, and the spec's `REALTIME_BACKPLANE_ENABLED`).
Durations are seconds (int, float or timedelta).

Each process role reads and validates only its own keys: the worker its
RealtimeDispatchOptions, the hub (Daphne) its HubOptions, both the DOMAIN_PORT. So a bad
hub-only secret never stops the worker, and the reverse. The loaded options are cached
(the hub reads them on every connect) and the cache is cleared when Django's
`setting_changed` fires for MESSENGER_REALTIME (tests) or by `clear_cache()`.
Every key, its type, default and rules are declared once in declared.py; problems are
reported by the system checks in checks.py, and the loaders refuse to build options from
invalid settings.
"""

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from messenger_realtime.conf.declared import BY_NAME, HUB, SETTINGS, WORKER, role_keys, validate
from messenger_realtime.conf.numbers import parse_number

DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}  # declared.py
_KINDS: dict[str, type] = {s.name: s.kind for s in SETTINGS}
ENV_PREFIX = "MESSENGER_REALTIME_"
_TRUE_WORDS = {"true", "1", "yes", "on"}
_BOOL_WORDS = _TRUE_WORDS | {"false", "0", "no", "off"}


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
    metrics_host: str
    build_timeout: float
    delivery_deadlines: dict[str, float]
    hub_backlog_limit: int
    hub_backlog_wait: float
    dispatched_log_sample: float
    dispatch_partitions: int
    wake_coalesce: float
    network_timeout: float


@dataclass(frozen=True)
class HubOptions:
    domain_port: str
    jwt_signing_key: str = dataclasses.field(repr=False)
    jwt_issuer: str
    jwt_audience: str
    jwt_lifetime: float
    jwt_max_lifetime: float
    jwt_leeway: float
    cors_allowed_origins: list[str]
    connection_token_ttl: float
    keepalive_interval: float
    client_timeout: float
    handshake_timeout: float
    max_message_size: int
    websocket_deflate: bool
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
    content_max_depth: int
    content_max_entries: int
    content_max_key_length: int
    content_max_string: int
    rate_limit_window: float
    rate_limit_writes: int
    rate_limit_invocations: int
    rate_limit_connects: int
    max_connections_per_user: int
    rate_limit_flood: int
    invocation_budget: float
    invocation_burst: int
    rate_limit_redis_url: str
    admission_limit: int
    admission_per_user: int
    admission_wait: float
    recovery_max_events: int
    recovery_max_bytes: int
    network_timeout: float


def env_name(key: str) -> str:
    """The environment variable that overrides a key."""
    return BY_NAME[key].env if key in BY_NAME else ENV_PREFIX + key


def _coerce(key: str, value: Any) -> Any:
    kind = _KINDS[key]
    if isinstance(value, str) and kind is bool:
        # Strict: a typo such as "ture" must not silently read as False.
        if value.strip().lower() not in _BOOL_WORDS:
            raise ValueError(f"not a boolean (use one of {sorted(_BOOL_WORDS)})")
        return value.strip().lower() in _TRUE_WORDS
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


def _validated(keys: frozenset[str], overrides: dict[str, Any]) -> dict[str, Any]:
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


@functools.cache
def network_timeout() -> float:
    """The validated NETWORK_TIMEOUT (both roles read it; the channel layer, built by
    Channels from CHANNEL_LAYERS, reads it here)."""
    return float(_validated(frozenset({"NETWORK_TIMEOUT"}), {})["network_timeout"])


def clear_cache() -> None:
    """Forget the loaded options (after settings or the environment changed)."""
    _cached.cache_clear()
    network_timeout.cache_clear()
