"""Every PostgreSQL connection the worker opens is bounded against a silent peer: libpq's
keepalives and tcp_user_timeout (what ends a silent flow on a real network), and a
statement that gets no answer within NETWORK_TIMEOUT fails the connection instead of
waiting for ever (what the worker notices it by, whatever the kernel does)."""

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.lease import Leader
from messenger_realtime.dispatch.wakes import Listener
from tests.support.proxy import TcpProxy
from tests.support.runtime import ROOT, run

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 3.0


@pytest.fixture(autouse=True)
def _network_timeout(settings: Any) -> None:
    settings.MESSENGER_REALTIME = {**settings.MESSENGER_REALTIME, "NETWORK_TIMEOUT": TIMEOUT}


def bounded(parameters: dict[str, str]) -> dict[str, str]:
    names = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count")
    return {k: parameters.get(k, "") for k in (*names, "tcp_user_timeout")}


EXPECTED = {
    "keepalives": "1",
    "keepalives_idle": "1",
    "keepalives_interval": "1",
    "keepalives_count": "2",
    "tcp_user_timeout": "3000",
}


def test_the_workers_own_connections_carry_keepalives_and_a_user_timeout() -> None:
    async def scenario() -> list[dict[str, str]]:
        leader, listener = Leader("test:net-bounds", 30.0), Listener()
        work = await db.connect()
        await leader.connect()
        await listener.listen()
        try:
            assert leader.conn is not None and listener.conn is not None
            return [bounded(c.info.get_parameters()) for c in (work, leader.conn, listener.conn)]
        finally:
            await work.close()
            await leader.close()
            await listener.close()

    assert run(scenario()) == [EXPECTED] * 3


CODE = """
import django; django.setup()
from django.db import connection
from messenger_realtime.dispatch.connections import dedicate_django_connection
dedicate_django_connection(statement_timeout=1.5)
connection.ensure_connection()
parameters = connection.connection.info.get_parameters()
names = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count")
print(" ".join(parameters.get(k, "-") for k in (*names, "tcp_user_timeout")))
"""


def test_the_workers_domain_reads_connection_carries_keepalives_and_a_user_timeout() -> None:
    dbs = settings.DATABASES["default"]
    url = f"postgres://{dbs['USER']}@{dbs['HOST'] or '127.0.0.1'}:{dbs['PORT'] or 5432}/postgres"
    out = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "MESSENGER_REALTIME_NETWORK_TIMEOUT": str(TIMEOUT),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == list(EXPECTED.values())


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    made = TcpProxy(int(settings.DATABASES["default"]["PORT"] or 5432))
    yield made
    made.close()


def test_a_statement_on_a_silent_connection_fails_within_the_bound(proxy: TcpProxy) -> None:
    async def scenario() -> tuple[type[BaseException], float, bool]:
        conn = await db.connect(port=str(proxy.port))
        await conn.execute("SELECT 1")
        proxy.silence()
        began = time.monotonic()
        try:  # (the test's own bound: without the product's, it would wait for ever)
            await asyncio.wait_for(conn.execute("SELECT 1"), TIMEOUT + 15)
        except psycopg.OperationalError as exc:
            return type(exc), time.monotonic() - began, conn.closed
        finally:
            await conn.close()
        raise AssertionError("answered through a silent connection")

    kind, took, closed = run(scenario())
    assert issubclass(kind, psycopg.OperationalError)
    assert TIMEOUT <= took <= TIMEOUT + 1.0
    assert closed  # its state is unknown: never used again
