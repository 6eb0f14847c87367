"""RealtimeDispatchOptions: the dispatcher's settings, read in one place.

Source order: built-in defaults (the spec's), then `settings.MESSENGER_REALTIME`, then the
environment (`MESSENGER_REALTIME_<KEY>`, and the spec's `REALTIME_BACKPLANE_ENABLED`).
Durations are seconds (int, float or timedelta). Problems are reported by the system
checks in checks.py; `load_options()` refuses to build options from invalid settings.
"""

import dataclasses
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import environ
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

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
}
_KINDS: dict[str, type] = {
    "BATCH_SIZE": int,
    "MAX_ATTEMPTS": int,
    "RETENTION_BATCH": int,
    "LOCK_KEY": str,
    "REALTIME_BACKPLANE_ENABLED": bool,
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

    def replace(self, **changes: Any) -> "RealtimeDispatchOptions":
        return dataclasses.replace(self, **changes)


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
    if isinstance(value, str):
        value = environ.Env.parse_value(value.strip(), kind)
    if kind is float and isinstance(value, timedelta):
        return value.total_seconds()
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


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


def load_options(**overrides: Any) -> RealtimeDispatchOptions:
    """Validated options; raises ImproperlyConfigured naming the first bad key."""
    from .checks import validate

    values, problems = collect()
    values.update({k.upper(): v for k, v in overrides.items()})
    errors = [f"{key}: {problem}" for key, problem in problems]
    errors += [f"{key}: {problem}" for _id, key, problem in validate(values)]
    if errors:
        raise ImproperlyConfigured("MESSENGER_REALTIME " + "; ".join(errors))
    return RealtimeDispatchOptions(**{k.lower(): v for k, v in values.items()})
