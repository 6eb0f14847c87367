"""System checks for MESSENGER_REALTIME: a typo or a bad value is an error, not silence.

Each check is tagged with the process roles it concerns, so `dispatch_realtime` runs only
the worker's (a hub-only secret cannot stop the worker) while `manage.py check` runs all.
DOMAIN_PORT's check (E011) lives with the port, in contracts/checks.py. An environment
variable with the settings' prefix that names no setting is a warning (W001): the
process starts, and says which variable it ignores and the closest real name (an unknown
settings key, E001, says it too). A database pool that does not bound every reply by
NETWORK_TIMEOUT, or no pool at all, is a warning (W002, W005), in hub/checks.py beside
the connection class it asks for. Mistakes that work but silently lose what the app is
for are warnings too: channels-redis' own layer in place of the app's (W003), no
RATE_LIMIT_REDIS_URL (W004).
`check --deploy` adds the secrets' own (secrets.py): a known placeholder is an error (E038),
and so is a Django SECRET_KEY weaker than Django's rule (E039, where Django only warns).
"""

import difflib
import os
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from messenger_realtime.conf.declared import HUB, SETTINGS, WORKER, role_keys, validate
from messenger_realtime.conf.layer_hosts import SETTING, host_problems
from messenger_realtime.conf.secrets import (
    MAKE_ONE,
    django_key_problem,
    is_placeholder,
    variables_holding,
)
from messenger_realtime.conf.settings import DEFAULTS, ENV_PREFIX, collect, env_name

WORKER_TAG = "messenger_realtime_worker"
HUB_TAG = "messenger_realtime_hub"
_SECRETS = frozenset(s.name for s in SETTINGS if s.secret)


def _secret_source(name: str, key: str, value: str) -> str:
    """`name`, and the environment variable it was read from when one holds its value
    (those named like `key` first: several variables may share one placeholder)."""
    held = variables_holding(value)
    held = [env for env in held if env == key] or [e for e in held if e.endswith(key)] or held
    return f"{name} (the value of {', '.join('$' + env for env in held)})" if held else name


def _named(key: str, values: dict[str, Any]) -> str:
    """The key as its messages name it; a secret also by the variable it came from (a host
    reads it from a name of its own, e.g. $JWT_SIGNING_KEY)."""
    name = f"MESSENGER_REALTIME[{key!r}]"
    return _secret_source(name, key, str(values.get(key) or "")) if key in _SECRETS else name


def _closest(key: str) -> str:
    """' Did you mean ...?' for a misspelled key (empty when nothing is close)."""
    close = difflib.get_close_matches(key.upper(), list(DEFAULTS), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _errors(keys: frozenset[str]) -> list[Error]:
    values, problems = collect()
    hint = "Fix settings.MESSENGER_REALTIME[{key!r}] or ${env}."
    errors = [
        Error(
            f"MESSENGER_REALTIME[{key!r}]: {problem}",
            hint=(
                hint.format(key=key, env=env_name(key))
                if problem != "unknown key"
                else f"Remove it or correct its name.{_closest(key)} The settings: "
                "docs/operations.md, Settings."
            ),
            id="messenger_realtime.E001" if problem == "unknown key" else "messenger_realtime.E002",
        )
        for key, problem in problems
        if key in keys
    ]
    errors += [
        Error(
            f"{_named(key, values)} {problem}.",
            hint=hint.format(key=key, env=env_name(key)),
            id=f"messenger_realtime.{check_id}",
        )
        for check_id, key, problem in validate(values)
        if key in keys
    ]
    return errors


@register(WORKER_TAG, HUB_TAG)
def check_unknown_keys(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E001: a key no role reads is a typo."""
    configured = getattr(settings, "MESSENGER_REALTIME", {}) or {}
    return _errors(frozenset(key for key in configured if key not in DEFAULTS))


@register(WORKER_TAG)
def check_worker_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The worker's keys, and a backplane it can reach the hub through."""
    errors = _errors(role_keys(WORKER) - {"DOMAIN_PORT"})
    values, _ = collect()
    layer = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {}).get("BACKEND", "")
    if values.get("REALTIME_BACKPLANE_ENABLED") and layer.endswith("InMemoryChannelLayer"):
        errors.append(
            Error(
                "REALTIME_BACKPLANE_ENABLED is true but CHANNEL_LAYERS['default'] is in-memory: "
                "the worker process could not reach the hub.",
                hint="Use messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer, or "
                "disable the backplane.",
                id="messenger_realtime.E013",
            )
        )
    return errors


APP_LAYER = "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer"
PLAIN_LAYERS = (
    "channels_redis.core.RedisChannelLayer",
    "channels_redis.pubsub.RedisPubSubChannelLayer",
)


@register(WORKER_TAG, HUB_TAG)
def check_channel_layer_backend(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W003: channels-redis' own layer where the app's is meant. It works, without what
    the app's adds: one batched receive per process instead of a round trip per message,
    a push's groups in one pipeline, overruns reported per connection, volatile typing,
    the backplane-restart check (docs/integration.md, step 4)."""
    backend = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {}).get("BACKEND", "")
    if backend not in PLAIN_LAYERS:
        return []
    return [
        Warning(
            f"CHANNEL_LAYERS['default']['BACKEND'] is {backend}: the app's layer batches "
            "receives and pushes, reports overruns to the connections that lost events and "
            "notices a Redis that forgot its groups; this one does none of that.",
            hint=f"Set CHANNEL_LAYERS['default']['BACKEND'] = {APP_LAYER!r} (same CONFIG; "
            "docs/integration.md, step 4).",
            id="messenger_realtime.W003",
        )
    ]


@register(HUB_TAG)
def check_rate_limit_store(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W004: no RATE_LIMIT_REDIS_URL: every per-user bound is off, silently."""
    values, _ = collect()
    if values.get("RATE_LIMIT_REDIS_URL"):
        return []
    return [
        Warning(
            "MESSENGER_REALTIME['RATE_LIMIT_REDIS_URL'] is empty: no per-user bound holds "
            "(REST and invocation rate limits, connects, MAX_CONNECTIONS_PER_USER, the "
            "typing claims) and presence has nowhere to live.",
            hint=f"Set it (or ${env_name('RATE_LIMIT_REDIS_URL')}) to a Redis URL, e.g. the "
            "channel layer's; to run without per-user bounds on purpose, add "
            "'messenger_realtime.W004' to SILENCED_SYSTEM_CHECKS.",
            id="messenger_realtime.W004",
        )
    ]


@register(WORKER_TAG, HUB_TAG)
def check_channel_layer_hosts(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E024: the Redis layer's hosts are a list of usable, distinct Redis URLs."""
    layer = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {})
    if "Redis" not in layer.get("BACKEND", "") or "hosts" not in layer.get("CONFIG", {}):
        return []
    return [
        Error(
            f"{SETTING} (the channel layer's Redis servers): {problem}.",
            hint=f"Set ${SETTING} to comma-separated Redis URLs, the same list in every "
            "process (default: $REDIS_URL alone); docs/operations.md, Sharded Redis.",
            id="messenger_realtime.E024",
        )
        for problem in host_problems(layer["CONFIG"]["hosts"])
    ]


@register(HUB_TAG)
def check_hub_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The hub's keys (tokens, media credentials, timeouts)."""
    return _errors(role_keys(HUB) - {"DOMAIN_PORT"})


@register(WORKER_TAG, HUB_TAG)
def check_unknown_environment(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W001: a MESSENGER_REALTIME_* variable that names no setting (a typo: ignored)."""
    known = {env_name(key) for key in DEFAULTS}
    warnings = []
    for name in sorted(os.environ):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        # Compared without the prefix every name shares (else all would look close).
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), list(DEFAULTS), n=1)
        hint = (
            f"Did you mean ${env_name(close[0])}?"
            if close
            else "The settings and their variables: docs/operations.md, Settings "
            "(or python manage.py dispatch_realtime --help)."
        )
        warnings.append(
            Warning(
                f"${name} names no MESSENGER_REALTIME setting: it is ignored.",
                hint=hint,
                id="messenger_realtime.W001",
            )
        )
    return warnings


def _deploy_hint(length: str) -> str:
    return f"Set a random value of its own, {length}, e.g. `{MAKE_ONE}`."


@register(Tags.security, deploy=True)
def check_deploy_secrets(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E038: a known placeholder secret; E039: a SECRET_KEY weaker than Django's rule."""
    values, _ = collect()
    errors = []
    for key in sorted(_SECRETS):
        value = str(values.get(key) or "")
        if value and is_placeholder(value):  # unset or short: E012's
            errors.append(
                Error(
                    f"{_named(key, values)} is a known placeholder: "
                    "anyone who has read it can mint tokens (or TURN credentials) for any "
                    "user.",
                    hint=_deploy_hint("at least 32 bytes"),
                    id="messenger_realtime.E038",
                )
            )
    secret_key = str(getattr(settings, "SECRET_KEY", "") or "")
    source = _secret_source("settings.SECRET_KEY", "SECRET_KEY", secret_key)
    if secret_key and is_placeholder(secret_key):
        errors.append(
            Error(
                f"{source} is a known placeholder: anyone who has read it can sign "
                "sessions (the admin's included) and whatever else Django signs.",
                hint=_deploy_hint("at least 50 characters"),
                id="messenger_realtime.E038",
            )
        )
    elif problem := django_key_problem(secret_key):
        errors.append(
            Error(
                f"{source} {problem}: Django calls it weak (security.W009), and it signs "
                "sessions (the admin's included).",
                hint=_deploy_hint("at least 50 characters, 5 of them distinct"),
                id="messenger_realtime.E039",
            )
        )
    return errors
