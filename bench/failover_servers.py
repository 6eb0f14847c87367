"""Servers that fail over, for the soak (bench/chaos.py --failover) and the failover tests
(tests/e2e/test_failover.py): real processes from Debian's packages, on loopback.

- `PostgresPair`: a primary and a streaming standby made with pg_basebackup, replicating
  synchronously (a commit waits for the standby's write: nothing acknowledged is lost
  in a failover; the promoted server runs alone, asynchronously, until its new standby
  streams) or, with `synchronous=False`, asynchronously (PostgreSQL's default: what the
  primary had not sent is lost with it). `failover()` crashes the primary (immediate
  shutdown: its connections reset) or freezes it (SIGSTOP to every process of the
  cluster: a host gone silent, its connections open and unanswered, new ones never
  answered) and promotes the standby with `pg_ctl promote`; `rebuild()` makes the old
  primary a standby of the new one, so the next failover goes back. Clients name both
  in one multi-host URL with target_session_attrs=read-write (libpq tries them in turn).
- `SentinelRedis`: a master, a replica and three `redis-server --sentinel` processes
  (quorum 2, the master down after DOWN_AFTER_MS). `failover()` kills or freezes the
  master and waits until the Sentinels name the promoted replica; `rebuild()` starts the old master
  again, empty, and waits until the Sentinels have made it a replica of the new one.

Every wait here is bounded (LIMIT); a server that does not come up fails the caller.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.hubclients import free_port, free_ports
from bench.private_postgres import PrivatePostgres, cluster_pids

LIMIT = 60.0  # s: any server's start, switch or catch-up
SERVICE = "mymaster"  # the Sentinels' name for the master
DOWN_AFTER_MS = 1000  # the master is down after this long without a reply
FAILOVER_TIMEOUT_MS = 5000


def wait_for(predicate: Callable[[], Any], what: str, limit: float = LIMIT) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = predicate()
            if value:
                return value
        time.sleep(0.05)  # polling a server's own answer
    raise RuntimeError(f"{what}: not within {limit:g} s")


class PostgresPair:
    """A primary and a streaming standby; either may be the primary (`primary`)."""

    def __init__(
        self, directory: Path, settings: dict[str, str] | None = None, synchronous: bool = True
    ) -> None:
        self.nodes = [
            PrivatePostgres(directory / "pg-a", free_port(), settings),
            PrivatePostgres(directory / "pg-b", free_port(), settings),
        ]
        self.primary = 0
        self.synchronous = synchronous
        self.frozen: list[int] = []

    @property
    def standby(self) -> int:
        return 1 - self.primary

    def url(self, ports: list[int] | None = None, dbname: str = "messenger") -> str:
        """A multi-host URL naming both servers (or `ports`, proxies in front of them, in
        the nodes' order): libpq connects to the one that takes writes. The standby of
        the start is named first, so that a client that took the first server to answer
        would land on a read-only one from its first connection."""
        ports = ports or [node.port for node in self.nodes]
        hosts = ",".join(f"127.0.0.1:{port}" for port in reversed(ports))
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def start(self) -> None:
        self.nodes[0].start()
        self.nodes[1].start_standby_of(self.nodes[0])
        self._replicate(synchronously=self.synchronous)

    def _sql(self, node: int, *statements: str) -> list[Any]:
        import psycopg

        port = self.nodes[node].port
        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres", autocommit=True) as c:
            cursors = [c.execute(statement) for statement in statements]
            return [cursor.fetchall() if cursor.description else [] for cursor in cursors]

    def _replicate(self, synchronously: bool) -> None:
        """The primary's commits wait for the standby (once it streams), or do not."""
        if not synchronously:
            self._sql(self.primary, "ALTER SYSTEM RESET synchronous_standby_names")
        else:
            streaming = "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'"
            wait_for(lambda: self._sql(self.primary, streaming)[0], "the standby streaming")
            self._sql(self.primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        self._sql(self.primary, "SELECT pg_reload_conf()")

    def wait_replayed(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        import psycopg

        primary, standby = self.nodes[self.primary], self.nodes[self.standby]
        with psycopg.connect(f"host=127.0.0.1 port={primary.port} user=postgres") as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            target = row[0]

        def replayed() -> bool:
            with psycopg.connect(f"host=127.0.0.1 port={standby.port} user=postgres") as conn:
                query = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
                answer = conn.execute(query, (target,)).fetchone()
                return bool(answer and answer[0])

        wait_for(replayed, "the standby's replay")

    def failover(self, freeze: bool = False) -> float:
        """Crash (or freeze) the primary, promote the standby; the promotion's end."""
        old = self.nodes[self.primary]
        if freeze:
            self.frozen = cluster_pids(old.postmaster_pid())
            for pid in self.frozen:
                os.kill(pid, signal.SIGSTOP)
        else:
            old.stop()  # immediate: no checkpoint, no goodbye
        self.nodes[self.standby].promote()
        self.primary = self.standby
        if self.synchronous:
            # Its configuration came from the old primary (pg_basebackup): alone, it would
            # hold every commit until a standby streams. The commits waiting meanwhile
            # (milliseconds) are released by the reload.
            self._replicate(synchronously=False)
        return time.time()

    def rebuild(self) -> None:
        """The old primary back as a standby of the new one (a frozen one killed first)."""
        frozen = self.frozen
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in frozen), "the kill")
        self.frozen = []
        old = self.nodes[self.standby]
        for leftover in old.dir.glob(".s.PGSQL.*"):  # a killed postmaster's socket and lock
            leftover.unlink(missing_ok=True)
        old.start_standby_of(self.nodes[self.primary])
        if self.synchronous:
            self._replicate(synchronously=True)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SentinelRedis:
    """A master, a replica and three Sentinels, each a redis-server of its own."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or Path(tempfile.mkdtemp(prefix="sentinel-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(5)
        self.ports = ports[:2]  # data servers: master first, at the start
        self.sentinel_ports = ports[2:]
        self.data: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.dead: tuple[int, subprocess.Popen[bytes]] | None = None  # the failed master
        self.started: list[subprocess.Popen[bytes]] = []  # every process, for stop()

    @property
    def url(self) -> str:
        sentinels = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{sentinels}/{SERVICE}/0"

    def _start_data(self, port: int, replica_of: int | None = None) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.dir)]
        argv += ["--dbfilename", f"dump-{port}.rdb"]
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        process = self.data[port] = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        self.started.append(process)
        wait_for(lambda: self.client(port).ping(), f"redis-server on {port}")

    def client(self, port: int) -> "redis.Redis[bytes]":
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> None:
        self._start_data(self.ports[0])
        self._start_data(self.ports[1], replica_of=self.ports[0])
        wait_for(lambda: self._linked(self.ports[1]), "the replica's link")
        for port in self.sentinel_ports:
            conf = self.dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports[0]} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            argv = ["redis-server", str(conf), "--sentinel"]
            self.sentinels.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
            self.started.append(self.sentinels[-1])
        wait_for(self._watched, "the Sentinels' view of the master, replica and each other")

    def _linked(self, port: int) -> bool:
        info = self.client(port).info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _watched(self) -> bool:
        """Every Sentinel knows the replica and the two other Sentinels: a failover can
        be voted and has somewhere to go."""
        for port in self.sentinel_ports:
            client = self.client(port)
            replicas = client.execute_command("SENTINEL", "REPLICAS", SERVICE)
            others = client.execute_command("SENTINEL", "SENTINELS", SERVICE)
            if len(replicas) < 1 or len(others) < 2:
                return False
        return True

    def master_port(self) -> int:
        """The master's port as the Sentinels name it (their majority)."""
        answers = []
        for port in self.sentinel_ports:
            with contextlib.suppress(redis.RedisError):
                address = self.client(port).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
                )
                answers.append(int(address[1]))
        return max(set(answers), key=answers.count)

    def failover(self, freeze: bool = False) -> float:
        """Kill (or freeze: SIGSTOP) the master; when the Sentinels name the promoted
        replica (epoch s)."""
        old = self.master_port()
        process = self.data.pop(old)
        process.send_signal(signal.SIGSTOP if freeze else signal.SIGKILL)
        self.dead = (old, process)
        wait_for(lambda: self.master_port() != old, "the Sentinels' switch")
        return time.time()

    def rebuild(self) -> None:
        """The old master started again (empty); the Sentinels make it a replica."""
        assert self.dead is not None, "no failover to rebuild from"
        dead, process = self.dead
        process.kill()
        process.wait()
        self.dead = None
        self._start_data(dead)
        wait_for(lambda: self._linked(dead), "the old master turned replica")
        wait_for(self._watched, "the Sentinels' view after the switch")

    def stop(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.sentinels, self.data, self.started = [], {}, []
        shutil.rmtree(self.dir, ignore_errors=True)
