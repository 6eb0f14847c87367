"""The README's run command brings up Daphne and the worker, and Ctrl-C stops both."""

import os
import signal
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.support.api_client import http_get
from tests.support.runtime import ROOT, free_port, wait_until
from tests.support.workers import LoggedProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def serve_database(django_db_setup: None) -> Iterator[str]:
    """A database of its own for the serve script (it creates and migrates it)."""
    db = connection.settings_dict
    name = f"messenger_serve_{os.getpid()}"
    yield f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    admin = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_serve_runs_daphne_and_the_worker_and_ctrl_c_stops_both(serve_database: str) -> None:
    port = free_port()
    env = dict(os.environ, DATABASE_URL=serve_database, REDIS_URL=settings.REDIS_URL)
    env["PORT"] = str(port)
    env["MESSENGER_REALTIME_METRICS_PORT"] = str(free_port())
    serve = LoggedProcess(["bash", str(ROOT / "scripts" / "serve")], env, start_new_session=True)
    try:
        serve.wait_for("dispatching", timeout=120)  # the worker leads
        wait_until(
            lambda: http_get(f"http://127.0.0.1:{port}/admin/login/", timeout=2)[0] == 200,
            what="Daphne to answer",
        )
        os.killpg(serve.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert serve.wait(timeout=30) == 0
        assert http_get(f"http://127.0.0.1:{port}/admin/login/", timeout=2)[0] == 0
        with pytest.raises(ProcessLookupError):  # Daphne and the worker are gone too
            os.killpg(serve.proc.pid, 0)
    finally:
        if serve.proc.poll() is None:
            os.killpg(serve.proc.pid, signal.SIGKILL)
        serve.kill()
