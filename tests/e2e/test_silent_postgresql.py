"""A worker whose PostgreSQL connections go silent (no bytes, no FIN, no RST: a NAT or a
load balancer that forgot the flows, a failover to a new address) notices within its
bound, reconnects, takes its lease back (its own abandoned session, which still holds the
lock on the server, is ended), LISTENs again and dispatches what was committed meanwhile.
While it waits, its /metrics says which dependency it waits on and for how long; its
/health/live stays 200 (it is not wedged: it will notice). The real worker process, the
real PostgreSQL behind the test's proxy.

Daphne's own connections (its REST views' pool, the hub's reads) are bounded as well: a
request on a silent one fails within NETWORK_TIMEOUT and the pool replaces it, where
before each read on it held its thread and its connection for ever."""

import re
import time
from collections.abc import Iterator

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.api_client import Api, http_get
from tests.support.factories import OutboxEntryFactory, UserFactory
from tests.support.hub_helpers import token_for
from tests.support.proxy import TcpProxy
from tests.support.runtime import free_port, wait_until
from tests.support.wire import negotiate
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow

TIMEOUT = 4.0  # NETWORK_TIMEOUT here (the default, 10 s, is measured in docs/reliability.md)
# Noticed within NETWORK_TIMEOUT of the first statement that gets no answer, which the
# next poll sends (POLLING_INTERVAL, 1 s); then RECONNECT_DELAY (1 s), the take-over of
# its own abandoned session and a pass. The slack is this box's scheduling.
RESUMED_WITHIN = TIMEOUT + 1.0 + 1.0 + 3.0


def through(proxy: TcpProxy, url: str) -> str:
    return re.sub(r":\d+/", f":{proxy.port}/", url, count=1)


def pending() -> int:
    return RealtimeOutboxEntry.objects.exclude(status="Done").count()


def sample(text: str, name: str) -> float:
    """A sample's value in Prometheus text (0 when absent)."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


WAIT = 'messenger_realtime_network_wait_seconds{dependency="postgresql"}'
TIMEOUTS = 'messenger_realtime_network_timeouts_total{dependency="postgresql"}'


@pytest.fixture
def proxy(worker_env: dict[str, str]) -> Iterator[TcpProxy]:
    db_port = int(re.search(r":(\d+)/", worker_env["DATABASE_URL"]).group(1))  # type: ignore[union-attr]
    made = TcpProxy(db_port)
    yield made
    made.close()


def test_a_worker_whose_database_connections_go_silent_resumes_dispatching(
    worker_env: dict[str, str], proxy: TcpProxy
) -> None:
    port = free_port()
    env = dict(worker_env, DATABASE_URL=through(proxy, worker_env["DATABASE_URL"]))
    worker = WorkerProcess(env, metrics_port=port, network_timeout=TIMEOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        worker.wait_for("dispatching", timeout=30)
        OutboxEntryFactory()
        wait_until(lambda: pending() == 0, timeout=15, what="the first row Done")
        worker.wait_for("idle; waiting")
        assert proxy.silence() >= 4  # lease, LISTEN, claims, outcomes (and the domain reads')
        began = time.monotonic()
        OutboxEntryFactory.create_batch(3)  # their NOTIFY goes into the silence
        waited, lives = 0.0, set()
        deadline = began + RESUMED_WITHIN + 20
        while pending() and time.monotonic() < deadline:
            waited = max(waited, sample(http_get(f"{url}/metrics")[1], WAIT))
            lives.add(http_get(f"{url}/health/live")[0])
        resumed = time.monotonic() - began
        assert pending() == 0, f"rows still Pending {resumed:.1f} s later:\n{worker.log()}"
        print(f"silent PostgreSQL: dispatching again after {resumed:.2f} s (TIMEOUT {TIMEOUT} s)")
        assert resumed <= RESUMED_WITHIN, worker.log()
        assert waited >= TIMEOUT / 2  # the wait was seen, named, while it lasted
        assert sample(http_get(f"{url}/metrics")[1], TIMEOUTS) >= 1
        assert lives == {200}  # noticed within its bound: never wedged
        assert worker.proc.poll() is None
    finally:
        worker.kill()


POOL = 4  # DATABASE_POOL_MAX_SIZE here: the requests below outnumber its connections
POOL_TIMEOUT = 4.0  # DATABASE_POOL_TIMEOUT here
# The pool checks the connection it lends (CONN_HEALTH_CHECKS) and, when the check fails,
# lends the next, until its own timeout: a request meets silent connections for at most
# DATABASE_POOL_TIMEOUT, plus NETWORK_TIMEOUT for the check or the read in hand. The slack
# is this box's scheduling.
ANSWERED_WITHIN = POOL_TIMEOUT + TIMEOUT + 3.0


def test_daphnes_database_connections_going_silent_fail_no_request_for_ever(
    worker_env: dict[str, str], proxy: TcpProxy
) -> None:
    """Before: the first request after the silence hung (the client gave up after 15 s)
    and so did every read of the hub; the pool's connections were lost one by one."""
    bob = UserFactory(name="bob")
    token = token_for(bob.id)
    env = dict(worker_env, DATABASE_URL=through(proxy, worker_env["DATABASE_URL"]))
    env.update(DATABASE_POOL_MAX_SIZE=str(POOL), DATABASE_POOL_MIN_SIZE=str(POOL))
    env.update(DATABASE_POOL_TIMEOUT=str(POOL_TIMEOUT))
    daphne = DaphneProcess(env, network_timeout=TIMEOUT)
    api = Api(daphne.http, token)
    try:
        assert api.call("GET", "/api/chats")[0] == 200
        assert negotiate(daphne, token)[0] == 200  # the hub's reads keep a connection
        wait_until(lambda: proxy.open_flows() >= POOL, what="the pool's connections open")
        assert proxy.silence() >= POOL
        statuses, slowest = [], 0.0
        for _ in range(POOL + 2):  # every silenced connection met at least once
            began = time.monotonic()
            statuses.append(api.call("GET", "/api/chats")[0])
            slowest = max(slowest, time.monotonic() - began)
        print(f"silent PostgreSQL under Daphne: {statuses}, slowest {slowest:.2f} s")
        assert set(statuses) <= {200, 503}, statuses  # a clear answer, never a hang
        assert slowest <= ANSWERED_WITHIN, daphne.log()
        assert statuses[-1] == 200, daphne.log()  # new connections replaced the silent ones
        began = time.monotonic()
        assert negotiate(daphne, token)[0] == 200, daphne.log()
        assert time.monotonic() - began <= ANSWERED_WITHIN
        text = http_get(f"{daphne.http}/metrics")[1]
        assert sample(text, TIMEOUTS) >= 1  # counted, by dependency
    finally:
        daphne.kill()
