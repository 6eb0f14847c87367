"""Every Redis the app uses, named by a redis+sentinel:// URL, against a real master, its
replica and three redis-server Sentinels (bench/failover_servers.py): the channel
layer and the per-user counters find the master through the Sentinels, and find the
promoted replica after the master is killed, without a new client or a restart.

Before: such a URL was refused by system checks E024 and E026, and a plain URL follows
no failover at all (the clients kept dialling the dead master's address).
"""

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.failover_servers import SentinelRedis
from messenger_realtime.backplane import sentinel
from messenger_realtime.backplane.layer import BatchReceiveRedisChannelLayer
from messenger_realtime.hub import ratelimit
from tests.support.runtime import run, wait_until

pytestmark = pytest.mark.slow
SWITCH_LIMIT = 30.0  # s: the target from a Sentinel switch to working again


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelRedis]:
    servers = SentinelRedis(tmp_path / "sentinel")
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def layer_of(url: str) -> Any:
    return BatchReceiveRedisChannelLayer(hosts=[{"address": url}])


def test_the_layer_and_the_counters_follow_the_master_across_a_failover(
    sentinels: SentinelRedis,
) -> None:
    url = sentinels.url
    group = f"chat.{uuid.uuid4()}"
    script_source = "return redis.call('INCR', KEYS[1])"
    counter = f"failover-test:{uuid.uuid4()}"

    async def scenario() -> None:
        layer = layer_of(url)
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "event", "n": 1})
        assert (await asyncio.wait_for(layer.receive(channel), 10))["n"] == 1
        count = ratelimit.registered_script(url, script_source)
        assert await count([counter]) == 1
        master = sentinels.master_port()

        # The membership and the counter reached the replica before the master dies.
        def replicated() -> bool:
            replica = next(p for p in sentinels.ports if p != master)
            return sentinels.client(replica).get(counter) == b"1"

        wait_until(replicated, what="replication of the counter")
        await asyncio.to_thread(sentinels.failover)
        assert sentinels.master_port() != master

        async def works_again() -> int:
            while True:
                try:
                    await layer.group_send(group, {"type": "event", "n": 2})
                    return int(await count([counter]))
                except Exception:  # the old master's connections fail first
                    await asyncio.sleep(0.1)  # retrying as the worker does

        counted = await asyncio.wait_for(works_again(), SWITCH_LIMIT)
        assert counted == 2  # the same counter, on the promoted replica
        received = await asyncio.wait_for(layer.receive(channel), 10)
        assert received["n"] == 2  # the group's membership came across too
        await ratelimit.close_clients()
        await layer.flush()

    run(scenario())


def test_a_blocking_client_finds_the_master_and_names_no_password() -> None:
    client = sentinel.client(
        "redis+sentinel://:s3cret@127.0.0.1:1,127.0.0.1:2/mymaster/4", socket_timeout=1
    )
    pool = client.connection_pool
    assert pool.service_name == "mymaster"  # type: ignore[attr-defined]
    assert pool.connection_kwargs["db"] == 4 and pool.connection_kwargs["password"] == "s3cret"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert [(s.connection_pool.connection_kwargs["port"]) for s in sentinels] == [1, 2]
    # The Sentinels' own connections are bounded as the master's are.
    assert all(s.connection_pool.connection_kwargs["socket_timeout"] == 1 for s in sentinels)
    assert "s3cret" not in repr(pool)
