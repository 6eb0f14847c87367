"""A worker whose PostgreSQL connections go silent (no bytes, no FIN, no RST: a NAT or a
load balancer that forgot the flows, a failover to a new address) notices within its
bound, reconnects, takes its lease back (its own abandoned session, which still holds the
lock on the server, is ended), LISTENs again and dispatches what was committed meanwhile.
While it waits, its /metrics says which dependency it waits on and for how long; its
/health/live stays 200 (it is not wedged: it will notice). The real worker process, the
real PostgreSQL behind the test's proxy."""

import re
import time
from collections.abc import Iterator

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.api_client import http_get
from tests.support.factories import OutboxEntryFactory
from tests.support.proxy import TcpProxy
from tests.support.runtime import free_port, wait_until
from tests.support.workers import WorkerProcess

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
