"""A PostgreSQL cluster of a bench run's own, in a temporary directory (bench/chaos.py,
bench/pg_cost.py --private): initdb, a free port, settings of the run's choosing, and
the CPU of this cluster's processes only (its postmaster and the postmaster's children,
read from /proc), so that other clusters on the machine do not count.

initdb and pg_ctl refuse to run as root: as root they run as the `postgres` user, on a
directory that user owns.
"""

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def as_postgres(argv: list[str]) -> list[str]:
    """initdb and pg_ctl refuse to run as root."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.getuid() == 0 else argv


class PrivatePostgres:
    """A PostgreSQL cluster of the run's own, in a temporary directory.

    `settings`: server settings (`-c name=value`) on top of PostgreSQL's defaults.
    """

    def __init__(self, directory: Path, port: int, settings: dict[str, str] | None = None) -> None:
        bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bindirs:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin, self.dir, self.port = bindirs[-1], directory, port
        self.settings = dict(settings or {})
        self.url = f"postgres://postgres@127.0.0.1:{port}/messenger"

    def _ctl(self, *args: str) -> None:
        argv = [str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), *args]
        subprocess.run(as_postgres(argv), check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres")
        initdb = [str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres"]
        subprocess.run(
            as_postgres([*initdb, "--auth=trust"]), check=True, capture_output=True, timeout=120
        )
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self.options = options
        self._ctl("-l", str(self.dir / "server.log"), "-w", "-o", options, "start")

    def start_standby_of(self, primary: "PrivatePostgres") -> None:
        """A streaming standby of `primary` (asynchronous): its data directory copied by
        pg_basebackup (-R writes primary_conninfo and standby.signal), then started with
        the primary's settings on this cluster's port. A directory left by an earlier
        life (a killed primary) is removed first."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres")
        shutil.rmtree(self.dir / "data", ignore_errors=True)
        basebackup = [str(self.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port)]
        basebackup += ["-U", "postgres", "-D", str(self.dir / "data"), "-R", "-X", "stream"]
        basebackup += ["-c", "fast"]
        subprocess.run(as_postgres(basebackup), check=True, capture_output=True, timeout=120)
        self.settings = dict(primary.settings)
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self.options = options
        self._ctl("-l", str(self.dir / "server.log"), "-w", "-o", options, "start")

    def promote(self) -> None:
        """A standby made primary (pg_ctl promote, waiting until it accepts writes)."""
        self._ctl("-w", "promote")

    def crash_restart(self) -> None:
        """Immediate shutdown (no checkpoint: a crash, recovered from WAL) and start."""
        self._ctl("-m", "immediate", "-w", "stop")
        self._ctl("-l", str(self.dir / "server.log"), "-w", "-o", self.options, "start")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._ctl("-m", "immediate", "-w", "stop")

    def postmaster_pid(self) -> int:
        """The running postmaster's pid (the first line of postmaster.pid)."""
        path = self.dir / "data" / "postmaster.pid"
        return int(path.read_text().split("\n", 1)[0])

    def cpu(self) -> float:
        """CPU seconds (user + system) of this cluster's processes: the postmaster and its
        children (backends, autovacuum, checkpointer, WAL writer, ...), those running and
        those that ended (an autovacuum worker, a closed session: the postmaster reaps
        them, so their CPU is in its cutime and cstime)."""
        return cluster_cpu(self.postmaster_pid())


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None once the process is gone."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return None


def cluster_pids(postmaster: int) -> list[int]:
    """`postmaster` and every process whose parent it is (the cluster's processes)."""
    pids = [postmaster]
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None and int(fields[1]) == postmaster:
            pids.append(int(entry.name))
    return pids


def cluster_cpu(postmaster: int) -> float:
    """CPU seconds of `postmaster`, of every process whose parent it is, and of the
    children it has reaped (fields: utime 11, stime 12, cutime 13, cstime 14, from the
    state field on; ppid 1)."""
    ticks = 0
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        fields = _stat(pid)
        if fields is None:
            continue
        if pid == postmaster:
            ticks += sum(int(f) for f in fields[11:15])
        elif int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / TICK
