"""MESSENGER_REALTIME: the spec's defaults, env overrides, and a check id per bad value."""

import os
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.core.checks import WARNING
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from messenger_realtime.conf.checks import HUB_TAG, WORKER_TAG
from messenger_realtime.conf.settings import collect, load_hub_options, load_options
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.exceptions import database_cause, unrecoverable
from tests.support.runtime import ROOT, manage
from tests.support.settings import check_realtime_settings, project_layer_hosts, realtime

HUB_ONLY = {
    "JWT_SIGNING_KEY",
    "CONNECTION_TOKEN_TTL",
    "MEDIA_TOKEN_TTL",
    "KEEPALIVE_INTERVAL",
    "CLIENT_TIMEOUT",
    "CORS_ALLOWED_ORIGINS",
    "MAX_MESSAGE_SIZE",
    "SEND_BUFFER_LIMIT",
    "STATEFUL_RECONNECT_BUFFER_SIZE",
    "DISCONNECT_TIMEOUT",
    "LONG_POLL_TIMEOUT",
    "TRANSPORTS",
    "WEBSOCKET_DEFLATE",
}


def check_ids(tags: list[str] | None = None) -> list[str]:
    return [str(e.id) for e in check_realtime_settings(tags)]


def test_defaults_are_the_specs() -> None:
    o = load_options()
    assert (o.polling_interval, o.batch_size, o.max_run_duration, o.max_attempts) == (1, 200, 5, 8)
    assert (o.backoff_base, o.backoff_factor, o.backoff_cap) == (2.0, 2.0, 120.0)
    assert (o.retention_done, o.lock_ttl) == (86400.0, 30.0)
    assert o.lock_key == "job:scheduled:messenger-realtime-dispatch"
    assert o.realtime_backplane_enabled is True
    assert o.dispatched_log_sample == 1.0  # every Done row logs `dispatched`
    assert check_ids() == []


def test_environment_overrides_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESSENGER_REALTIME_BATCH_SIZE", "50")
    monkeypatch.setenv("REALTIME_BACKPLANE_ENABLED", "false")
    with realtime({"BATCH_SIZE": 10, "POLLING_INTERVAL": 0.25}):
        o = load_options()
    assert (o.batch_size, o.polling_interval, o.realtime_backplane_enabled) == (50, 0.25, False)


@pytest.mark.parametrize(
    ("configured", "check_id"),
    [
        ({"BATCH_SIZE": 0}, "messenger_realtime.E003"),
        ({"BATCH_SIZE": -5}, "messenger_realtime.E003"),
        ({"MAX_ATTEMPTS": 0}, "messenger_realtime.E004"),
        ({"BACKOFF_BASE": 0}, "messenger_realtime.E005"),
        ({"BACKOFF_CAP": -1}, "messenger_realtime.E005"),
        ({"BACKOFF_FACTOR": 0.5}, "messenger_realtime.E005"),
        ({"BACKOFF_BASE": 10, "BACKOFF_CAP": 5}, "messenger_realtime.E006"),
        ({"POLLING_INTERVAL": 0}, "messenger_realtime.E007"),
        ({"MAX_RUN_DURATION": -1}, "messenger_realtime.E007"),
        ({"LOCK_TTL": 0}, "messenger_realtime.E007"),
        ({"BACKOFF_JITTER": 1.5}, "messenger_realtime.E008"),
        ({"LOCK_KEY": " "}, "messenger_realtime.E009"),
        ({"RETENTION_BATCH": 0}, "messenger_realtime.E010"),
        ({"BATCH_SIZ": 100}, "messenger_realtime.E001"),
        ({"BATCH_SIZE": "many"}, "messenger_realtime.E002"),
        ({"BATCH_SIZE": True}, "messenger_realtime.E002"),
        ({"REALTIME_BACKPLANE_ENABLED": "ture"}, "messenger_realtime.E002"),
        ({"WEBSOCKET_DEFLATE": "sometimes"}, "messenger_realtime.E002"),
        ({"WEBSOCKET_DEFLATE": 1}, "messenger_realtime.E002"),
        ({"WEBSOCKET_DEFLATE": "off"}, None),
        ({"WEBSOCKET_DEFLATE": False}, None),
        ({"CORS_ALLOWED_ORIGINS": "http://a.example"}, None),  # a string is a 1-item list
        ({"CORS_ALLOWED_ORIGINS": [1]}, "messenger_realtime.E002"),
        ({"KEEPALIVE_INTERVAL": 0}, "messenger_realtime.E007"),
        ({"CLIENT_TIMEOUT": -1}, "messenger_realtime.E007"),
        ({"MAX_MESSAGE_SIZE": 0}, "messenger_realtime.E010"),
        ({"SEND_BUFFER_LIMIT": 4096}, "messenger_realtime.E017"),
        ({"SEND_BUFFER_LIMIT": 65536}, None),
        ({"STATEFUL_RECONNECT_BUFFER_SIZE": 1000}, "messenger_realtime.E018"),
        ({"STATEFUL_RECONNECT_BUFFER_SIZE": -1}, "messenger_realtime.E018"),
        ({"STATEFUL_RECONNECT_BUFFER_SIZE": 0}, None),  # stateful reconnect not offered
        ({"STATEFUL_RECONNECT_BUFFER_SIZE": 16384}, None),
        ({"DISCONNECT_TIMEOUT": 0}, "messenger_realtime.E007"),
        ({"DISCONNECT_TIMEOUT": 301}, "messenger_realtime.E019"),
        ({"DISCONNECT_TIMEOUT": 300}, None),
        ({"LONG_POLL_TIMEOUT": 100}, "messenger_realtime.E020"),
        ({"LONG_POLL_TIMEOUT": 0}, "messenger_realtime.E007"),
        ({"LONG_POLL_TIMEOUT": 99.5}, None),
        ({"TRANSPORTS": []}, "messenger_realtime.E021"),
        ({"TRANSPORTS": ["WebSockets", "CarrierPigeon"]}, "messenger_realtime.E021"),
        ({"TRANSPORTS": "LongPolling"}, None),  # a string is a 1-item list
        ({"DOMAIN_PORT": ""}, "messenger_realtime.E011"),
        ({"DOMAIN_PORT": "project.nowhere.Port"}, "messenger_realtime.E011"),
        ({"DOMAIN_PORT": "builtins.object"}, "messenger_realtime.E011"),
        ({"JWT_SIGNING_KEY": "short"}, "messenger_realtime.E012"),
        ({"DISPATCHED_LOG_SAMPLE": 1.5}, "messenger_realtime.E016"),
        ({"DISPATCHED_LOG_SAMPLE": -0.1}, "messenger_realtime.E016"),
        ({"DISPATCHED_LOG_SAMPLE": 0}, None),  # no `dispatched` lines at all
        ({"DISPATCHED_LOG_SAMPLE": 0.01}, None),
        ({"DISPATCH_PARTITIONS": 0}, "messenger_realtime.E022"),
        ({"DISPATCH_PARTITIONS": 65}, "messenger_realtime.E022"),
        ({"DISPATCH_PARTITIONS": "two"}, "messenger_realtime.E002"),
        ({"DISPATCH_PARTITIONS": 64}, None),
        ({"WAKE_COALESCE": -0.001}, "messenger_realtime.E023"),
        ({"WAKE_COALESCE": 0.5}, "messenger_realtime.E023"),
        ({"WAKE_COALESCE": 0}, None),  # coalescing off
        ({"WAKE_COALESCE": 0.1}, None),
        # Issue 29: absurd values and contradictions, refused by name.
        ({"LOCK_TTL": 10**12}, "messenger_realtime.E027"),
        ({"LOCK_TTL": 2.5}, "messenger_realtime.E031"),
        ({"BATCH_SIZE": 10**12}, "messenger_realtime.E027"),
        ({"RETENTION_BATCH": 10**12}, "messenger_realtime.E027"),
        ({"CONNECTION_TOKEN_TTL": 10**12}, "messenger_realtime.E027"),
        ({"MEDIA_TOKEN_TTL": 10**12}, "messenger_realtime.E027"),
        ({"LOCK_TTL": float("inf")}, "messenger_realtime.E002"),
        ({"BACKOFF_CAP": float("nan")}, "messenger_realtime.E002"),
        ({"KEEPALIVE_INTERVAL": 20}, "messenger_realtime.E028"),  # 60: CLIENT_TIMEOUT's too
        ({"KEEPALIVE_INTERVAL": 15}, None),
        ({"CLIENT_TIMEOUT": 10}, "messenger_realtime.E028"),
        ({"BATCH_SIZE": 10_000}, None),
    ],
)
def test_invalid_setting_is_an_error_naming_the_key(
    configured: dict[str, object], check_id: str | None
) -> None:
    key = next(iter(configured)) if check_id != "messenger_realtime.E006" else "BACKOFF_CAP"
    if check_id is None:
        with realtime(configured):
            assert check_ids() == []
        return
    with realtime(configured):
        errors = check_realtime_settings()
        assert [e.id for e in errors] == [check_id]
        assert key in errors[0].msg
        with pytest.raises(ImproperlyConfigured, match=key):
            if key == "DOMAIN_PORT":
                get_domain_port.__wrapped__()  # uncached: both roles build the port
            elif key in HUB_ONLY:
                load_hub_options()
            else:
                load_options()


@pytest.mark.parametrize(
    ("variable", "text", "parsed"),
    [
        ("LOCK_TTL", "1e3", 1000.0),
        ("LOCK_TTL", " 0.5 ", 0.5),
        ("BATCH_SIZE", "250", 250),
        ("LOCK_TTL", "inf", None),
        ("LOCK_TTL", "nan", None),
        ("LOCK_TTL", "1e12abc", None),
        ("BATCH_SIZE", "1e3", None),  # an integer setting takes a whole number only
        ("BATCH_SIZE", "12abc", None),
        ("BATCH_SIZE", "0.5", None),
    ],
)
def test_numbers_in_the_environment_are_parsed_exactly_or_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, parsed: float | None
) -> None:
    # django-environ's parse_value read "1e12" as 112.0 and "1e3" as 13.0.
    monkeypatch.setenv(f"MESSENGER_REALTIME_{variable}", text)
    values, problems = collect()
    if parsed is None:
        assert [key for key, _problem in problems] == [variable]
        assert repr(text) in dict(problems)[variable]
    else:
        assert problems == [] and values[variable] == parsed
        assert type(values[variable]) is type(parsed)


@pytest.mark.parametrize(
    ("variable", "text", "problem"),
    [
        ("DATABASE_POOL_MAX_SIZE", "1e3", "invalid value '1e3': not a whole number"),
        # The hub's reads keep one pooled connection: one alone would starve every request.
        ("DATABASE_POOL_MAX_SIZE", "1", "1 leaves no pooled connection beside"),
        ("DATABASE_POOL_TIMEOUT", "inf", "invalid value 'inf': not a finite number"),
        ("DATABASE_POOL_TIMEOUT", "nan", "invalid value 'nan': not a finite number"),
        ("CHANNEL_CAPACITY", "12abc", "invalid value '12abc': not a whole number"),
        ("CHANNEL_CAPACITY", "1000000000000", "is outside [1, 1e+07]"),
        ("DJANGO_SECURE_HSTS_SECONDS", "-1", "is outside [0, 6.3072e+07]"),
    ],
)
def test_the_projects_own_numbers_are_parsed_exactly_or_refused_by_name(
    variable: str, text: str, problem: str
) -> None:
    # django-environ's env.int("CHANNEL_CAPACITY") read "1e12" as 112; now the settings
    # module refuses the value, naming the variable (the process does not start).
    env = dict(os.environ, **{variable: text})
    code = "import project.settings"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert f"${variable}: " in proc.stderr and problem in proc.stderr, proc.stderr[-500:]


def test_a_float_of_the_projects_own_is_parsed_exactly() -> None:
    env = dict(os.environ, DATABASE_POOL_TIMEOUT="2.5e0", DATABASE_POOL_MAX_SIZE="3")
    code = "import project.settings as s; print(s.DATABASES['default']['OPTIONS']['pool'])"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "'timeout': 2.5" in proc.stdout and "'max_size': 3" in proc.stdout, proc.stderr


def test_invalid_environment_value_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESSENGER_REALTIME_MAX_ATTEMPTS", "eight")
    errors = check_realtime_settings()
    assert [e.id for e in errors] == ["messenger_realtime.E002"]
    assert "MAX_ATTEMPTS" in errors[0].msg and "MESSENGER_REALTIME_MAX_ATTEMPTS" in errors[0].hint


def test_worker_refuses_to_start_on_invalid_settings() -> None:
    env = dict(os.environ, MESSENGER_REALTIME_BATCH_SIZE="0")
    proc = subprocess.run(
        manage("dispatch_realtime", "--once"), env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "messenger_realtime.E003" in proc.stderr and "BATCH_SIZE" in proc.stderr


def test_backplane_flag_must_match_the_channel_layer() -> None:
    in_memory = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(CHANNEL_LAYERS=in_memory):
        assert check_ids() == ["messenger_realtime.E013"]
    with (
        override_settings(CHANNEL_LAYERS=in_memory),
        realtime({"REALTIME_BACKPLANE_ENABLED": False}),
    ):
        assert check_ids() == []


def test_hub_options_carry_the_key_but_never_show_it() -> None:
    options = load_hub_options()
    assert len(options.jwt_signing_key) >= 32
    assert options.jwt_signing_key not in repr(options)


def test_a_hub_only_setting_never_stops_the_worker_and_the_reverse() -> None:
    with realtime({"TURN_SHARED_SECRET": "short"}):
        assert check_ids([WORKER_TAG]) == []
        assert check_ids([HUB_TAG]) == ["messenger_realtime.E012"]
        assert load_options().batch_size == 200
        with pytest.raises(ImproperlyConfigured, match="TURN_SHARED_SECRET"):
            load_hub_options()
    with realtime({"BATCH_SIZE": 0}):
        assert check_ids([HUB_TAG]) == []
        assert load_hub_options().max_message_size == 32 * 1024
        with pytest.raises(ImproperlyConfigured, match="BATCH_SIZE"):
            load_options()


def test_options_are_cached_until_the_setting_changes() -> None:
    assert load_options() is load_options()
    assert load_hub_options() is load_hub_options()
    before = load_options()
    with realtime({"BATCH_SIZE": 7}):
        assert load_options().batch_size == 7
    assert load_options() is not before and load_options().batch_size == 200


def redis_layer(hosts: object) -> override_settings:
    backend = "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer"
    return override_settings(
        CHANNEL_LAYERS={"default": {"BACKEND": backend, "CONFIG": {"hosts": hosts}}}
    )


def test_channel_layer_hosts_must_be_distinct_redis_urls() -> None:
    good = ["redis://127.0.0.1:6379/6", "rediss://:pw@cache-2:6380", "unix:///run/redis.sock"]
    with redis_layer([{"address": url} for url in good]):
        assert check_ids([WORKER_TAG]) == check_ids([HUB_TAG]) == []
    bad = [
        "redis://127.0.0.1:6379/6",
        "",  # a stray comma in CHANNEL_REDIS_URLS
        "redis//typo:6379",
        "redis://:s3cret@cache:port/0",
        "redis://cache:6379/x",
        "redis://127.0.0.1:6379/6",
    ]
    with redis_layer([{"address": url} for url in bad]):
        errors = check_realtime_settings([WORKER_TAG])
        assert check_ids([HUB_TAG]) == [str(e.id) for e in errors]  # both roles refuse
    assert [e.id for e in errors] == ["messenger_realtime.E024"] * 5
    prefix = "CHANNEL_REDIS_URLS (the channel layer's Redis servers): "
    assert [e.msg.removeprefix(prefix) for e in errors] == [
        "entry 2 ('') is empty.",
        "entry 3 ('redis//typo:6379') is not a redis://, rediss://, unix:// or"
        " redis+sentinel:// URL.",
        "entry 4 ('redis://***@cache:port/0') has an invalid port.",
        "entry 5 ('redis://cache:6379/x') has a database that is not a number"
        " (redis://host:port/DB).",
        "entry 6 ('redis://127.0.0.1:6379/6') lists the same server again"
        " (one server would take two ring positions).",
    ]
    assert "s3cret" not in "".join(e.msg + str(e.hint) for e in errors)
    with redis_layer([]):
        assert "is empty" in check_realtime_settings()[0].msg


def test_channel_redis_urls_shard_the_layer_and_default_to_redis_url() -> None:
    shards = "redis://10.0.0.1:6379/0, redis://10.0.0.2:6379/0"
    assert project_layer_hosts(REDIS_URL="redis://one:6379/3") == ["redis://one:6379/3"]
    assert project_layer_hosts(CHANNEL_REDIS_URLS=shards) == [
        "redis://10.0.0.1:6379/0",
        "redis://10.0.0.2:6379/0",
    ]


def test_worker_refuses_to_start_on_a_bad_channel_redis_url() -> None:
    env = dict(os.environ, CHANNEL_REDIS_URLS="redis://127.0.0.1:6379/6,")
    proc = subprocess.run(
        manage("dispatch_realtime", "--once"), env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "messenger_realtime.E024" in proc.stderr and "entry 2 ('') is empty" in proc.stderr


@pytest.mark.parametrize(
    ("message", "fatal"),
    [
        ('connection failed: ... FATAL:  password authentication failed for user "x"', True),
        ('connection failed: ... FATAL:  database "nope" does not exist', True),
        ('connection failed: ... FATAL:  role "nobody" does not exist', True),
        ("connection failed: ... FATAL:  no pg_hba.conf entry for host", True),
        ('connection failed: connection to server at "127.0.0.1", port 1 failed: refused', False),
        ("consuming input failed: server closed the connection unexpectedly", False),
    ],
)
def test_a_database_error_retrying_cannot_fix_is_told_apart(message: str, fatal: bool) -> None:
    error = psycopg.OperationalError(message + "\nsecond line")
    assert unrecoverable(error) is fatal
    assert database_cause(error) == message  # the first line, as libpq wrote it


def test_a_misspelled_environment_variable_is_a_warning_naming_the_closest_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: MESSENGER_REALTIME_BATCHSIZE was silently ignored."""
    monkeypatch.setenv("MESSENGER_REALTIME_BATCHSIZE", "50")
    monkeypatch.setenv("MESSENGER_REALTIME_NOTHING_LIKE_IT", "1")
    found = sorted(check_realtime_settings(), key=lambda m: m.msg)
    assert [m.id for m in found] == ["messenger_realtime.W001"] * 2
    assert all(m.level == WARNING for m in found)
    batch, other = found
    assert "MESSENGER_REALTIME_BATCHSIZE" in batch.msg and "ignored" in batch.msg
    assert "MESSENGER_REALTIME_BATCH_SIZE" in str(batch.hint)
    assert "MESSENGER_REALTIME_NOTHING_LIKE_IT" in other.msg
    assert "docs/operations.md" in str(other.hint)  # no close name: where the names are
    assert set(check_ids([WORKER_TAG])) == set(check_ids([HUB_TAG])) == {"messenger_realtime.W001"}


def test_the_worker_warns_of_a_misspelled_environment_variable_at_start() -> None:
    env = dict(os.environ, MESSENGER_REALTIME_BATCHSIZE="50")
    env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/nowhere"  # --once fails: fine
    proc = subprocess.run(
        manage("dispatch_realtime", "--once"), env=env, capture_output=True, text=True, timeout=60
    )
    assert "messenger_realtime.W001" in proc.stderr
    assert "MESSENGER_REALTIME_BATCHSIZE" in proc.stderr
    assert "MESSENGER_REALTIME_BATCH_SIZE" in proc.stderr


def test_a_database_pool_without_the_bounded_connection_is_a_warning() -> None:
    """W002: Daphne's requests and the hub's reads on a silent flow would wait for ever."""
    from messenger_realtime.hub.bounded_pool import BoundedConnection
    from messenger_realtime.hub.checks import check_database_pool, unbounded_pools

    for pool in ({"max_size": 4}, True):
        (warning,) = unbounded_pools({"default": {"OPTIONS": {"pool": pool}}})
        assert warning.id == "messenger_realtime.W002" and warning.level == WARNING
        assert "DATABASES['default']['OPTIONS']['pool'] lends connections" in warning.msg
        assert "messenger_realtime.hub.bounded_pool.BoundedConnection" in str(warning.hint)
    bounded = {"default": {"OPTIONS": {"pool": {"connection_class": BoundedConnection}}}}
    assert unbounded_pools(bounded) == []
    assert unbounded_pools({"default": {"OPTIONS": {}}}) == []  # no pool: no class to give
    assert HUB_TAG in check_database_pool.tags  # type: ignore[attr-defined]  # the hub's checks


def test_a_misspelled_settings_key_is_told_the_closest_name() -> None:
    with realtime({"BATCH_SIZ": 100}):
        (error,) = [m for m in check_realtime_settings() if m.id == "messenger_realtime.E001"]
    assert "'BATCH_SIZ'" in error.msg and "Did you mean 'BATCH_SIZE'?" in str(error.hint)


def test_channels_redis_own_layer_in_place_of_the_apps_is_a_warning_naming_it() -> None:
    """Before: it passed `check`; the hub then ran without batched receives, overrun
    reports or the backplane-restart check."""
    layers = {
        "default": {
            **settings.CHANNEL_LAYERS["default"],
            "BACKEND": "channels_redis.core.RedisChannelLayer",
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        found = [m for m in check_realtime_settings() if m.id == "messenger_realtime.W003"]
    assert len(found) == 1 and found[0].level == WARNING
    assert "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer" in str(found[0].hint)


def test_no_rate_limit_store_is_a_warning_saying_what_is_off() -> None:
    """Before: every per-user bound was off without a word."""
    with realtime({"RATE_LIMIT_REDIS_URL": ""}):
        (warning,) = [m for m in check_realtime_settings() if m.id == "messenger_realtime.W004"]
        assert "messenger_realtime.W004" not in check_ids([WORKER_TAG])  # the hub's alone
    assert "MAX_CONNECTIONS_PER_USER" in warning.msg
    assert "SILENCED_SYSTEM_CHECKS" in str(warning.hint)


def test_no_database_pool_at_all_is_a_warning_and_a_bounded_one_is_not() -> None:
    """Before: W002 fired for a pool of the wrong class only; none at all passed."""
    from messenger_realtime.hub.bounded_pool import BoundedConnection
    from messenger_realtime.hub.checks import unbounded_pools

    engine = {"ENGINE": "django.db.backends.postgresql"}
    bounded = {"pool": {"connection_class": BoundedConnection}}
    (none,) = unbounded_pools({"default": {**engine, "OPTIONS": {}}})
    assert none.id == "messenger_realtime.W005" and "BoundedConnection" in str(none.hint)
    assert "PgBouncer" in str(none.hint)
    assert unbounded_pools({"default": {**engine, "OPTIONS": bounded}}) == []
    (other,) = unbounded_pools({"default": {**engine, "OPTIONS": {"pool": {"max_size": 4}}}})
    assert other.id == "messenger_realtime.W002"
