"""System checks for MESSENGER_REALTIME: a typo or a bad value is an error, not silence."""

from typing import Any

from django.core.checks import Error, register

from .conf import collect, env_name

_POSITIVE_DURATIONS = (
    "POLLING_INTERVAL",
    "MAX_RUN_DURATION",
    "RETENTION_DONE",
    "RETENTION_INTERVAL",
    "LOCK_TTL",
    "PUBLISH_TIMEOUT",
)


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
    return found


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
    return errors
