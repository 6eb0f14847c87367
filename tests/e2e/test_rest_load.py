"""REST under concurrent load through real Daphne: every post succeeds, Seq stays gapless,
and PostgreSQL sees no more sessions than Daphne's pool plus the worker's own."""

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from django.db import connection

from project.messenger import services
from project.messenger.models import Message
from tests.support.api_client import Api
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
CLIENTS, POSTS = 10, 50
POOL_MAX = 6
WORKER_SESSIONS = 5  # lease, LISTEN, claims, outcomes, domain reads (docs/dispatcher.md)
WEB_APP = "messenger-web-under-load"
WORKER_APP = "messenger-realtime-dispatch"


class SessionSampler:
    """Polls pg_stat_activity of one database from a thread; keeps the peak per name."""

    def __init__(self, dbname: str) -> None:
        db = connection.settings_dict
        self.conn = psycopg.connect(
            host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres",
            autocommit=True, application_name="test-sampler",
        )  # fmt: skip
        self.dbname = dbname
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            rows = self.conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name <> 'test-sampler' GROUP BY 1",
                (self.dbname,),
            ).fetchall()
            for name, count in rows:
                self.peak[name] = max(self.peak.get(name, 0), count)
            self.peak_total = max(self.peak_total, sum(count for _, count in rows))
            self.samples += 1
            self.done.wait(0.005)  # a sampling period, not a synchronisation

    def __enter__(self) -> "SessionSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done.set()
        self.thread.join()
        self.conn.close()


@pytest.fixture
def hub_under_load(worker_env: dict[str, str]) -> Iterator[DaphneProcess]:
    env = dict(
        worker_env,
        DATABASE_POOL_MAX_SIZE=str(POOL_MAX),
        DATABASE_POOL_MIN_SIZE="1",
        DATABASE_APPLICATION_NAME=WEB_APP,
    )
    worker = WorkerProcess(env, polling_interval=0.5)
    daphne = DaphneProcess(env)
    yield daphne
    daphne.kill()
    worker.kill()


def test_ten_clients_posting_fifty_each_all_succeed_gapless_within_the_pool_bound(
    hub_under_load: DaphneProcess,
) -> None:
    members = [UserFactory(name=f"poster{n}") for n in range(CLIENTS)]
    chat = services.create_chat(members[0].id, [m.id for m in members[1:]], title="load")
    connection.close()
    connection.close_pool()  # type: ignore[attr-defined]  (the test's own sessions: not counted)

    def post_fifty(user: Any) -> list[int]:
        api = Api(hub_under_load.http, token_for(user.id))
        path = f"/api/chats/{chat.id}/messages"
        return [api.call("POST", path, {"body": f"{user.id} {n}"})[0] for n in range(POSTS)]

    sampler = SessionSampler(connection.settings_dict["NAME"])
    with sampler, ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        statuses = [s for batch in pool.map(post_fifty, members) for s in batch]
    assert statuses == [201] * (CLIENTS * POSTS)
    seqs = sorted(Message.objects.filter(chat_id=chat.id).values_list("seq", flat=True))
    assert seqs == list(range(1, CLIENTS * POSTS + 1))
    assert sampler.samples > 10
    assert 1 < sampler.peak.get(WEB_APP, 0) <= POOL_MAX, sampler.peak
    assert sampler.peak.get(WORKER_APP, 0) <= WORKER_SESSIONS, sampler.peak
    assert sampler.peak_total <= POOL_MAX + WORKER_SESSIONS, sampler.peak
