"""A hub process whose Redis connections go silent (no bytes, no FIN, no RST: a NAT or a
load balancer that forgot the flows) notices within its bound, reconnects, joins its
groups again and tells every connection (a Close with allowReconnect: the client
recovers what the silent connection swallowed), as after a Redis restart. Real Redis
behind the test's proxy; the hub's own fan-out and layer. Plus: the layer's sockets carry
keepalives and TCP_USER_TIMEOUT (what notices a silent flow on a real network, which the
proxy's loopback kernel would acknowledge for ever), and a wait the bounds missed makes
Daphne's /health/live answer 503, naming Redis and for how long."""

import gc
import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import RequestFactory
from prometheus_client import REGISTRY

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.hub import restarts
from messenger_realtime.hub.fanout import Fanout
from messenger_realtime.ops import metrics, webhealth
from tests.support.helpers import end_layers, layer
from tests.support.proxy import TcpProxy
from tests.support.runtime import PrivateRedis, await_until, run

TIMEOUT = 3.0  # NETWORK_TIMEOUT in these tests (the default, 10 s, is measured in the docs)
# Noticed within NETWORK_TIMEOUT plus one probe period (hub/restarts.py), plus the
# rejoin's round trip; the slack is this box's scheduling, not the product's.
NOTICED_WITHIN = TIMEOUT + restarts.EPOCH_CHECK + 1.0


@pytest.fixture
def proxy(private_redis: PrivateRedis) -> Iterator[TcpProxy]:
    made = TcpProxy(private_redis.port)
    yield made
    made.close()


@pytest.fixture(autouse=True)
def _network_timeout(settings: Any) -> None:
    settings.MESSENGER_REALTIME = {**settings.MESSENGER_REALTIME, "NETWORK_TIMEOUT": TIMEOUT}


def chat_event(chat: uuid.UUID, n: int) -> OutgoingEvent:
    return OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": n})


def timeouts(dependency: str) -> float:
    """messenger_realtime_network_timeouts_total{dependency} (0 where it does not exist)."""
    family = getattr(metrics, "network_timeouts", None)
    return float(family.labels(dependency=dependency)._value.get()) if family else 0.0


def blocked_receives(server: PrivateRedis) -> int:
    """Clients of `server` blocked in a pop now (the hub's reader waiting for messages)."""
    return sum(1 for c in server.client().client_list() if c["cmd"] == "bzmpop")


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_silent_redis_connections_are_noticed_and_every_connection_is_told(
    private_redis: PrivateRedis, proxy: TcpProxy
) -> None:
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))

    async def scenario() -> tuple[float, list[Any], list[int], float]:
        hub = layer(f"redis://127.0.0.1:{proxy.port}/0")  # the hub's Redis, through the proxy
        worker = ChannelLayerPublisher(layer(private_redis.url))  # the worker's, direct
        fanout = Fanout(hub)
        first, second = fanout.inbox(), fanout.inbox()
        await fanout.join(group, first)
        await fanout.join(group, second)
        await worker.publish_many([chat_event(chat, 1)])
        await await_until(lambda: len(first) == 1 and len(second) == 1, 10, "delivered")
        await first.take(5), await second.take(5)
        await await_until(lambda: fanout.restarts.epochs, 10, "the server's run id learned")
        before = timeouts("redis")
        assert proxy.silence() >= 2  # the reader's blocked receive and the probes' connection
        noticed = await await_until(lambda: len(first) and len(second), NOTICED_WITHIN + 10, "told")
        told = [await first.take(5), await second.take(5)]
        await worker.publish_many([chat_event(chat, 2)])  # reaches the process again
        await await_until(lambda: len(first) == 1, 10, "an event after the silence")
        after = [m["payload"]["seq"] for m in await first.take(5)]
        counted = timeouts("redis") - before
        await end_layers(hub, worker.layer)
        return noticed, told, after, counted

    noticed, told, after, counted = run(scenario())
    gc.collect()  # what the silenced flows left, under this test's filter
    print(f"silent Redis noticed and told after {noticed:.2f} s (NETWORK_TIMEOUT {TIMEOUT} s)")
    assert noticed <= NOTICED_WITHIN
    assert told == [[restarts.BACKPLANE_RESTARTED_MESSAGE]] * 2
    assert after == [2]
    assert counted >= 1  # messenger_realtime_network_timeouts_total{dependency="redis"}


def test_the_layers_redis_sockets_carry_keepalives_and_a_user_timeout(
    private_redis: PrivateRedis,
) -> None:
    """On a real network a silent flow is also ended by the kernel: keepalive probes on an
    idle connection, TCP_USER_TIMEOUT on unacknowledged data, both within the bound."""

    async def scenario() -> dict[str, int]:
        hub = layer(private_redis.url)
        client = hub.connection(0)
        await client.ping()
        connection = next(iter(client.connection_pool._available_connections))
        sock = connection._writer.transport.get_extra_info("socket")
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
            "read_timeout": connection.socket_timeout,
        }

    got = run(scenario())
    assert got["keepalive"] == 1
    assert got["idle"] + got["interval"] * got["count"] <= TIMEOUT
    assert got["user_timeout_ms"] == TIMEOUT * 1000
    assert got["read_timeout"] == TIMEOUT


def test_a_receive_wedged_past_its_bound_makes_daphne_not_live_naming_redis(
    private_redis: PrivateRedis, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait the bounds missed (here: the layer's socket timeout taken away, as before
    this fix) is a wedged process: /health/live answers 503 with what stalled and for
    how long, so a supervisor restarts it; the metric says the same."""
    from messenger_realtime.backplane import layer as layer_module

    monkeypatch.setattr(layer_module, "bounded_hosts", lambda hosts, timeout: hosts, raising=False)
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))
    factory = RequestFactory()

    def live() -> tuple[int, dict[str, Any]]:
        response = webhealth.live(factory.get("/health/live"))
        return response.status_code, json.loads(response.content)

    async def scenario() -> tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]], Any]:
        hub = layer(f"redis://127.0.0.1:{proxy.port}/0")
        fanout = Fanout(hub)
        inbox = fanout.inbox()
        await fanout.join(group, inbox)
        await await_until(lambda: blocked_receives(private_redis), 10, "the reader's receive sent")
        healthy = live()
        proxy.silence()
        await await_until(lambda: live()[0] == 503, 2 * TIMEOUT + 15, "not live")
        stalled = live()
        gauge = REGISTRY.get_sample_value(
            "messenger_realtime_network_wait_seconds", {"dependency": "redis"}
        )
        for task in fanout._tasks.values():
            task.cancel()
        return healthy, stalled, gauge

    healthy, stalled, gauge = run(scenario())
    assert healthy[0] == 200
    assert stalled[0] == 503
    assert stalled[1]["stalled"]["redis"] > TIMEOUT
    assert gauge > TIMEOUT  # messenger_realtime_network_wait_seconds{dependency="redis"}
