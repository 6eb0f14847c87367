"""System checks for MESSENGER_REALTIME: a typo or a bad value is an error, not silence."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, register
from django.utils.module_loading import import_string

from messenger_realtime.conf.settings import collect, env_name

_POSITIVE_DURATIONS = (
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
)
MIN_JWT_KEY_BYTES = 32  # RFC 7518: an HS256 key at least as long as the hash


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
    for key in _POSITIVE_DURATIONS:
        rule("E007", key, values.get(key, 1) > 0, "must be > 0 seconds")
    jitter = values.get("BACKOFF_JITTER", 0)
    rule("E008", "BACKOFF_JITTER", 0 <= jitter < 1, "must be in [0, 1)")
    rule("E009", "LOCK_KEY", bool(str(values.get("LOCK_KEY", "x")).strip()), "must not be empty")
    rule("E010", "RETENTION_BATCH", values.get("RETENTION_BATCH", 1) > 0, "must be > 0")
    rule("E010", "MAX_MESSAGE_SIZE", values.get("MAX_MESSAGE_SIZE", 1) > 0, "must be > 0")
    port = values.get("METRICS_PORT", 0)
    rule("E010", "METRICS_PORT", 0 <= port <= 65535, "must be 0 (off) or a TCP port")
    rule(
        "E011",
        "DOMAIN_PORT",
        _port_problem(values.get("DOMAIN_PORT", "x")) is None,
        str(_port_problem(values.get("DOMAIN_PORT", "x"))),
    )
    for secret in ("JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET"):
        key = str(values.get(secret, "x" * MIN_JWT_KEY_BYTES))
        ok = len(key.encode()) >= MIN_JWT_KEY_BYTES
        rule("E012", secret, ok, f"must be set, at least {MIN_JWT_KEY_BYTES} bytes")
    urls = [str(u) for u in values.get("ICE_SERVERS", [])]
    ok = all(u.startswith(("stun:", "turn:", "turns:")) for u in urls)
    rule("E014", "ICE_SERVERS", ok, "every entry must be a stun:, turn: or turns: URL")
    return found


def _port_problem(path: str) -> str | None:
    """Why DOMAIN_PORT is unusable, or None."""
    if not path:
        return "must name the host's DomainPort class (dotted path)"
    try:
        port_class = import_string(path)
    except ImportError as exc:
        return f"cannot import {path!r}: {exc}"
    from messenger_realtime.contracts.port import DomainPort

    missing = [
        m for m in DomainPort.__abstractmethods__ if not callable(getattr(port_class, m, None))
    ]
    return f"{path} lacks {', '.join(sorted(missing))}" if missing else None


@register()
def check_realtime_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    values, problems = collect()
    errors = [
        Error(
            f"MESSENGER_REALTIME[{key!r}]: {problem}",
            hint=f"Fix settings.MESSENGER_REALTIME[{key!r}] or ${env_name(key)}.",
            id="messenger_realtime.E001" if problem == "unknown key" else "messenger_realtime.E002",
        )
        for key, problem in problems
    ]
    errors += [
        Error(
            f"MESSENGER_REALTIME[{key!r}] {problem}.",
            hint=f"Fix settings.MESSENGER_REALTIME[{key!r}] or ${env_name(key)}.",
            id=f"messenger_realtime.{check_id}",
        )
        for check_id, key, problem in validate(values)
    ]
    layer = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {}).get("BACKEND", "")
    if values.get("REALTIME_BACKPLANE_ENABLED") and layer.endswith("InMemoryChannelLayer"):
        errors.append(
            Error(
                "REALTIME_BACKPLANE_ENABLED is true but CHANNEL_LAYERS['default'] is in-memory: "
                "the worker process could not reach the hub.",
                hint="Use messenger_realtime.transport.layer.BatchReceiveRedisChannelLayer (or "
                "channels_redis.core.RedisChannelLayer), or disable the backplane.",
                id="messenger_realtime.E013",
            )
        )
    return errors
