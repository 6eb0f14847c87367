"""The settings of a failover (docs/operations.md, "Failover"): a redis+sentinel:// URL
wherever a Redis URL goes, and a multi-host DATABASE_URL whose target_session_attrs
reaches every connection the app makes, the worker's own included.

Before: E024 and E026 refused a Sentinel URL, and the worker's connections dropped
target_session_attrs: a standby named first in DATABASE_URL got the worker's claims,
and the worker stopped on ReadOnlySqlTransaction (bench/chaos.py --failover postgresql
on 47f6a94).
"""

import pytest
from psycopg.conninfo import conninfo_to_dict

from messenger_realtime.conf import sentinel_url
from messenger_realtime.conf.layer_hosts import host_problems, split_urls
from tests.support.runtime import project_settings
from tests.support.settings import check_realtime_settings, project_layer_hosts, realtime

SENTINELS = "redis+sentinel://10.0.0.1:26379,10.0.0.2,[::1]:26380/mymaster/2"


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    parsed = sentinel_url.parse(SENTINELS)
    assert parsed.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert (parsed.service, parsed.db, parsed.password) == ("mymaster", 2, None)
    secret = sentinel_url.parse("redis+sentinel://:m%40ster@s1/cache?sentinel_password=s3")
    assert (secret.password, secret.sentinel_password, secret.db) == ("m@ster", "s3", 0)
    assert "m@ster" not in repr(secret) and "'s3'" not in repr(secret)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://s1:26379,s2:26379", "names no service"),
        ("redis+sentinel://s1:26379,,s2/mymaster", "names an empty Sentinel"),
        ("redis+sentinel://s1:port/mymaster", "names a Sentinel with an invalid port"),
        ("redis+sentinel://s1/mymaster/zero", "has a path other than /SERVICE or /SERVICE/DB"),
        ("redis+sentinel://s1/mymaster?master_password=x", "has unknown options"),
    ],
)
def test_a_bad_sentinel_url_is_refused_saying_what_is_wrong(url: str, problem: str) -> None:
    (found,) = host_problems([url])
    assert problem in found
    with pytest.raises(ValueError, match=problem):
        sentinel_url.parse(url)


def test_the_password_of_a_sentinel_url_never_reaches_a_check_message() -> None:
    (found,) = host_problems(["redis+sentinel://:s3cret@s1:x/mymaster"])
    assert "s3cret" not in found and "***@" in found


def test_channel_redis_urls_keep_a_sentinel_urls_own_commas() -> None:
    """The list's commas separate URLs; a Sentinel URL's commas separate its Sentinels."""
    value = f"redis://10.0.0.9:6379/0,{SENTINELS}, redis+sentinel://s1,s2/other"
    assert split_urls(value) == [
        "redis://10.0.0.9:6379/0",
        SENTINELS,
        "redis+sentinel://s1,s2/other",
    ]
    assert split_urls("redis://a:6379/0,,redis://b:6379/0")[1] == ""  # E024 names it
    assert project_layer_hosts(REDIS_URL=SENTINELS) == [SENTINELS]
    assert host_problems([SENTINELS]) == []


def test_the_rate_limit_store_takes_a_sentinel_url_and_refuses_a_broken_one() -> None:
    with realtime({"RATE_LIMIT_REDIS_URL": SENTINELS}):
        assert [m.id for m in check_realtime_settings() if m.id.endswith("E026")] == []
    with realtime({"RATE_LIMIT_REDIS_URL": "redis+sentinel://s1,s2"}):
        (error,) = [m for m in check_realtime_settings() if m.id.endswith("E026")]
    assert "RATE_LIMIT_REDIS_URL" in error.msg and "redis+sentinel://" in error.msg


def test_a_multi_host_database_url_reaches_the_workers_connections_whole() -> None:
    url = "postgres://app@10.0.0.1:5432,10.0.0.2:5433/messenger?target_session_attrs=read-write"
    worker = "__import__('messenger_realtime.dispatch.connections').dispatch.connections.conninfo()"
    conninfo = conninfo_to_dict(str(project_settings(worker, DATABASE_URL=url)))
    assert conninfo["host"] == "10.0.0.1,10.0.0.2" and conninfo["port"] == "5432,5433"
    assert conninfo["target_session_attrs"] == "read-write"
    django = project_settings("settings.DATABASES['default']", DATABASE_URL=url)
    assert django["HOST"] == "10.0.0.1,10.0.0.2" and django["PORT"] == "5432,5433"
    assert django["OPTIONS"]["target_session_attrs"] == "read-write"
