"""A multi-host DATABASE_URL across a real failover: a primary and its streaming standby
(bench/failover_servers.py, pg_basebackup and pg_ctl promote), the standby promoted
while the server named first has gone silent (every process of it stopped: a host that
vanished, its port still accepting, nothing answering).

Before: the web pool's connection class waited psycopg's default connect timeout, 130 s
an attempt, on the silent first server before trying the promoted one, so every new
pooled connection of a Daphne took over two minutes after such a failover.
"""

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.test import override_settings

from bench.failover_servers import PostgresPair
from messenger_realtime.hub.bounded_pool import BoundedConnection

pytestmark = pytest.mark.slow
NETWORK_TIMEOUT = 3.0


@pytest.fixture
def pair() -> Iterator[PostgresPair]:
    # Not pytest's tmp_path: the postgres user runs the clusters, and may not enter it.
    directory = Path(tempfile.mkdtemp(prefix="pg-failover-"))
    directory.chmod(0o755)
    servers = PostgresPair(directory, {"fsync": "off", "max_connections": "20"})
    try:
        servers.start()
        yield servers
    finally:
        if servers.frozen:
            servers.rebuild()  # kills the frozen server's processes
        servers.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_pooled_connection_skips_a_silent_first_server_within_the_network_timeout(
    pair: PostgresPair,
) -> None:
    url = pair.url(dbname="postgres")  # names the first standby first
    pair.failover()  # the first primary crashed: the server named first now takes writes
    pair.rebuild()
    first = pair.primary
    pair.failover(freeze=True)  # it goes silent; the other one is promoted
    promoted = pair.nodes[pair.primary].port
    assert pair.primary != first
    timeout = {"NETWORK_TIMEOUT": NETWORK_TIMEOUT}
    with override_settings(MESSENGER_REALTIME={**settings.MESSENGER_REALTIME, **timeout}):
        started = time.monotonic()
        with BoundedConnection.connect(url) as conn:
            took = time.monotonic() - started
            assert conn.info.port == promoted
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
    # NETWORK_TIMEOUT on the silent server, then the promoted one (psycopg: 130 s).
    assert NETWORK_TIMEOUT <= took < 4 * NETWORK_TIMEOUT, took


def test_a_standby_named_first_is_skipped_for_the_primary(pair: PostgresPair) -> None:
    url = pair.url(dbname="postgres")
    with BoundedConnection.connect(url) as conn:
        assert conn.info.port == pair.nodes[pair.primary].port
    plain = url.replace("?target_session_attrs=read-write", "")
    with psycopg.connect(plain) as conn:  # without it, libpq takes the first that answers
        assert conn.info.port == pair.nodes[pair.standby].port
