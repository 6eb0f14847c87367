"""The worker's /metrics and /health endpoints move as it runs (read over HTTP)."""

import json
import re
import signal

import pytest
from websockets.sync.client import connect

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.operations import requeue
from tests.support.api_client import http_get, sample
from tests.support.factories import LONG_AGO, OutboxEntryFactory, UserFactory
from tests.support.hub_helpers import token_for
from tests.support.proxy import TcpProxy
from tests.support.runtime import PrivateRedis, free_port, wait_until
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow


def test_metrics_move_as_the_worker_dispatches_retries_and_quarantines(
    worker_env: dict[str, str], private_redis: PrivateRedis
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    OutboxEntryFactory.create_batch(3)
    worker = WorkerProcess(worker_env, polling_interval=0.2, metrics_port=port)
    try:
        wait_until(
            lambda: RealtimeOutboxEntry.objects.filter(status="Done").count() == 3,
            what="three rows Done",
        )

        def metrics() -> str:
            return http_get(f"{url}/metrics")[1]

        wait_until(
            lambda: (
                sample(metrics(), "messenger_realtime_dispatched_total", kind="MessageReceived")
                == 3
            ),
            what="dispatched 3",
        )
        text = metrics()
        assert sample(text, "messenger_realtime_lag_seconds_count") == 3
        assert sample(text, "messenger_realtime_lag_seconds_bucket", le="+Inf") == 3
        assert sample(text, "messenger_realtime_quarantined_total", kind="CallInvited") == 0
        assert sample(text, "messenger_realtime_last_pass_timestamp_seconds") > 1.7e9
        wait_until(lambda: sample(metrics(), "messenger_realtime_pending") == 0, what="0")
        assert json.loads(http_get(f"{url}/health/ready")[1])["leading"] is True
        assert http_get(f"{url}/health/live")[0] == 200
    finally:
        worker.kill()

    # A dead channel layer: retries, a growing backlog, then quarantine at MAX_ATTEMPTS.
    entry = OutboxEntryFactory()
    private_redis.process.kill()
    private_redis.process.wait()
    env = dict(worker_env, REDIS_URL=private_redis.url)
    worker = WorkerProcess(
        env,
        polling_interval=0.2,
        metrics_port=port,
        max_attempts=2,
        backoff_base=0.2,
        backoff_cap=0.2,
        backoff_jitter=0,
    )
    try:
        wait_until(
            lambda: RealtimeOutboxEntry.objects.get(id=entry.id).status == "Quarantined",
            timeout=30,
            what="quarantine",
        )
        text = http_get(f"{url}/metrics")[1]
        assert sample(text, "messenger_realtime_retried_total", kind="MessageReceived") == 1
        assert sample(text, "messenger_realtime_quarantined_total", kind="MessageReceived") == 1
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        worker.kill()


def test_pending_gauge_and_oldest_age_report_a_backlog(worker_env: dict[str, str]) -> None:
    port = free_port()
    # A standby cannot dispatch; the leader here holds rows back with a later NextAttemptAt.
    OutboxEntryFactory.create_batch(4, long_ago=True, due_later=True)
    worker = WorkerProcess(worker_env, polling_interval=0.2, metrics_port=port)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_until(lambda: sample(http_get(url)[1], "messenger_realtime_pending") == 4, what="4")
        age = sample(http_get(url)[1], "messenger_realtime_oldest_pending_age_seconds")
        assert LONG_AGO.total_seconds() <= age < LONG_AGO.total_seconds() + 60
    finally:
        worker.kill()


def through(proxy: TcpProxy, url: str) -> str:
    """`url` with its port replaced by the proxy's."""
    return re.sub(r":\d+/", f":{proxy.port}/", url, count=1)


def test_worker_readiness_follows_its_database(worker_env: dict[str, str]) -> None:
    db_port = int(re.search(r":(\d+)/", worker_env["DATABASE_URL"]).group(1))  # type: ignore[union-attr]
    proxy = TcpProxy(db_port)
    env = dict(worker_env, DATABASE_URL=through(proxy, worker_env["DATABASE_URL"]))
    port = free_port()
    worker = WorkerProcess(env, polling_interval=0.2, metrics_port=port)
    url = f"http://127.0.0.1:{port}/health"
    try:
        wait_until(lambda: http_get(f"{url}/ready")[0] == 200, what="ready")
        proxy.cut()  # PostgreSQL unreachable for this worker
        wait_until(lambda: http_get(f"{url}/ready")[0] == 503, what="not ready")
        assert json.loads(http_get(f"{url}/ready")[1])["database"] is False
        assert http_get(f"{url}/live")[0] == 200  # alive and retrying: no restart needed
        proxy.restore()
        wait_until(lambda: http_get(f"{url}/ready")[0] == 200, what="ready again")
    finally:
        worker.kill()
        proxy.close()


def test_web_readiness_follows_postgresql_and_redis(live_env: dict[str, str]) -> None:
    db_port = int(re.search(r":(\d+)/", live_env["DATABASE_URL"]).group(1))  # type: ignore[union-attr]
    redis_port = int(re.search(r":(\d+)/", live_env["REDIS_URL"]).group(1))  # type: ignore[union-attr]
    db, redis = TcpProxy(db_port), TcpProxy(redis_port)
    env = dict(
        live_env,
        DATABASE_URL=through(db, live_env["DATABASE_URL"]),
        REDIS_URL=through(redis, live_env["REDIS_URL"]),
    )
    daphne = DaphneProcess(env)
    url = f"{daphne.http}/health"
    try:
        assert http_get(f"{url}/live")[0] == 200
        assert json.loads(http_get(f"{url}/ready")[1]) == {
            "status": "ok",
            "database": True,
            "channelLayer": True,
        }
        redis.cut()
        status, body = http_get(f"{url}/ready")
        assert (status, json.loads(body)["channelLayer"]) == (503, False)
        redis.restore()
        wait_until(lambda: http_get(f"{url}/ready")[0] == 200, what="redis back")
        db.cut()
        status, body = http_get(f"{url}/ready")
        assert (status, json.loads(body)["database"]) == (503, False)
        assert http_get(f"{url}/live")[0] == 200
        db.restore()
        wait_until(lambda: http_get(f"{url}/ready")[0] == 200, what="database back")
    finally:
        daphne.kill()
        db.close()
        redis.close()


def test_daphne_metrics_count_hub_connections(worker_env: dict[str, str]) -> None:
    user = UserFactory()
    daphne = DaphneProcess(worker_env)
    url = f"{daphne.http}/metrics"
    try:
        with connect(f"{daphne.ws}/hubs/messenger?access_token={token_for(user.id)}") as ws:
            ws.send('{"protocol":"json","version":1}\x1e')
            assert ws.recv(timeout=5) == "{}\x1e"
            assert sample(http_get(url)[1], "messenger_realtime_hub_connections") == 1
        wait_until(
            lambda: sample(http_get(url)[1], "messenger_realtime_hub_connections") == 0,
            what="closed",
        )
        assert sample(http_get(url)[1], "messenger_realtime_hub_disconnects_total") == 1
        assert "django_http_requests_total_by_method_total" in http_get(url)[1]
    finally:
        daphne.kill()


def test_quarantined_rows_gauge_holds_until_the_rows_are_requeued(
    worker_env: dict[str, str],
) -> None:
    port = free_port()
    rows = OutboxEntryFactory.create_batch(2, quarantined=True)
    worker = WorkerProcess(worker_env, polling_interval=0.2, metrics_port=port)
    url = f"http://127.0.0.1:{port}/metrics"

    def gauge() -> float:
        return sample(
            http_get(url)[1], "messenger_realtime_quarantined_rows", kind="MessageReceived"
        )

    try:
        wait_until(lambda: gauge() == 2, what="2 quarantined rows")
        # No new quarantine happened: the counter stays 0, the gauge still reports the rows.
        assert (
            sample(http_get(url)[1], "messenger_realtime_quarantined_total", kind="MessageReceived")
            == 0
        )
        assert (
            sample(http_get(url)[1], "messenger_realtime_quarantined_rows", kind="CallInvited") == 0
        )
        assert requeue([row.id for row in rows]) == 2
        wait_until(lambda: gauge() == 0, what="requeued rows leave the gauge")
        wait_until(
            lambda: RealtimeOutboxEntry.objects.filter(status="Done").count() == 2,
            what="requeued rows delivered",
        )
    finally:
        worker.kill()
