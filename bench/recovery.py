"""Catching up after a hub restart: `Recover` over the hub against REST resync (issue 28).

    .venv/bin/python bench/recovery.py [--clients N] [--chats-per-user C] [--members K]
        [--missed M] [--procs P] [--mode recover|rest|both]

N official @microsoft/signalr clients (bench/storm_clients.mjs, P Node processes, the web
module's retry-forever policy) on one Daphne and the worker; each user is in C chats of K
members. The Daphne is killed (SIGKILL); while it is down M messages are committed into
each of the user's chats per client on average (M / C per chat), pushed by the worker to
nobody (no hub process holds the groups), and the Daphne is started again on its port.
Each client then catches up, as the web module does:
- recover: one `Recover` for its C streams from the offsets it holds; REST only for a
  chat the hub answers "resync";
- rest: every chat resynced over REST (list-messages), as the web module did before.
Measured from the restart: seconds until every client is connected again, and until
every client holds every message; the restarted Daphne's CPU seconds; PostgreSQL's CPU
seconds (every `postgres` process of the machine, so run it on a quiet machine); REST
requests made; `Recover` round trips (p50/p95 ms). Fresh scratch database. Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import UUID

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import connections, e2e, hubclients, hubs, storm  # noqa: E402
from messenger_realtime.uuid7 import uuid7  # noqa: E402

DATABASE_URL = os.environ.get("RECOVERY_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_recovery"
)
REDIS_URL = os.environ.get("RECOVERY_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/11"
)
TICK = os.sysconf("SC_CLK_TCK")

# Users in username order; layer L (0..C-1) splits them, rotated by L * K / C, into chats
# of K members: every user is in exactly C chats, and two users share few of them.
SEED_SQL = [
    "TRUNCATE messenger.realtime_outbox, messenger.realtime_stream",
    "TRUNCATE messenger_chat, messenger_user CASCADE",
    "INSERT INTO messenger_user (id, password, is_superuser, username, first_name, last_name,"
    " email, is_staff, is_active, date_joined, display_name) SELECT gen_random_uuid(), '!',"
    " false, 'rc' || lpad(g::text, 6, '0'), '', '', '', false, true, now(), ''"
    " FROM generate_series(0, %(users)s - 1) g",
    "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
    " SELECT gen_random_uuid(), 'Group', 'rc ' || lpad(g::text, 6, '0'), 0, now(), now()"
    " FROM generate_series(0, %(chats)s - 1) g",
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, last_read_seq, joined_at)"
    " SELECT gen_random_uuid(), c.id, u.id, true, 0, now()"
    " FROM (SELECT id, row_number() OVER (ORDER BY username) - 1 AS i FROM messenger_user) u"
    " CROSS JOIN generate_series(0, %(per_user)s - 1) AS layer"
    " JOIN (SELECT id, row_number() OVER (ORDER BY title) - 1 AS k FROM messenger_chat) c"
    "   ON c.k = layer * (%(users)s / %(members)s)"
    "      + ((u.i + layer * (%(members)s / %(per_user)s + 1)) %% %(users)s) / %(members)s",
    "ANALYZE",
]


def postgres_cpu() -> float:
    """CPU seconds (user + system) of every `postgres` process on this machine."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            text = stat.read_text()
            if "(postgres)" not in text:
                continue
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


async def seed(conn: Any, users: int, per_user: int, members: int) -> dict[str, list[str]]:
    """Seed, and return each user's chats (user id -> chat ids)."""
    chats = users // members * per_user
    params = {"users": users, "chats": chats, "per_user": per_user, "members": members}
    for statement in SEED_SQL:
        await conn.execute(statement, params)
    rows = await (
        await conn.execute("SELECT user_id, chat_id FROM messenger_participant ORDER BY 1, 2")
    ).fetchall()
    of: dict[str, list[str]] = {}
    for user, chat in rows:
        of.setdefault(str(user), []).append(str(chat))
    assert all(len(c) == per_user for c in of.values()), "every user in C chats"
    return of


async def catch_up(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    import psycopg
    import redis

    limits = connections.raise_file_limit(args.clients + storm.FD_HEADROOM)
    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    layer = redis.Redis.from_url(REDIS_URL)
    layer.flushdb()
    directory = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    result: dict[str, Any] = {"mode": mode, "file_limit": limits}
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(layer.flushdb)
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        chats_of = await seed(conn, args.clients, args.chats_per_user, args.members)
        minted = hubclients.mint_tokens([UUID(user) for user in chats_of])
        tokens = {str(user): token for user, token in minted.items()}
        port = hubclients.free_port()
        daphne: dict[str, hubclients.Service] = {}

        async def start_daphne() -> hubclients.Service:
            daphne["hub"] = await hubclients.Service.start(
                "recovery-hub", hubs.daphne_argv(port), env, "Listening on TCP address"
            )
            return daphne["hub"]

        await start_daphne()
        stack.push_async_callback(lambda: daphne["hub"].stop())
        worker = await hubclients.Service.start(
            "recovery-worker",
            [sys.executable, "manage.py", "dispatch_realtime"],
            env,
            r"\bdispatching\b",
        )
        stack.push_async_callback(worker.stop)
        users = list(chats_of)
        procs: list[storm.NodeClients] = []
        for i in range(args.procs):
            config = {
                "hub": f"http://127.0.0.1:{port}",
                "concurrency": 25,
                "recover": mode == "recover",
                "retryForever": True,
                "clients": [
                    {"token": tokens[u], "chats": chats_of[u]} for u in users[i :: args.procs]
                ],
            }
            procs.append(await storm.NodeClients.start(f"r{i}", config, directory))
            stack.push_async_callback(procs[-1].stop)
        began = time.time()
        started = await asyncio.gather(*(p.started for p in procs))
        result["first_connect_s"] = round(time.time() - began, 1)
        if sum(s["connected"] for s in started) != args.clients:
            raise RuntimeError(f"not every client connected: {started}")

        daphne["hub"].proc.send_signal(signal.SIGKILL)
        await daphne["hub"].proc.wait()
        chats = sorted({c for cs in chats_of.values() for c in cs})
        one_member = "SELECT DISTINCT ON (chat_id) chat_id, user_id FROM messenger_participant"
        members = await (await conn.execute(one_member)).fetchall()
        sender = {str(c): str(u) for c, u in members}
        per_chat = args.missed // args.chats_per_user
        for _ in range(per_chat):
            for chat in chats:
                params = {"chat": chat, "message": uuid7(), "sender": sender[chat]}
                await conn.execute(e2e.SEND_SQL, {**params, "entry": uuid7(), "body": "missed"})
        # Pushed to nobody: wait until the worker has marked every row Done.
        pending = "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
        for _ in range(600):
            row = await (await conn.execute(pending)).fetchone()
            if row and row[0] == 0:
                break
            await asyncio.sleep(0.5)
        last = await (await conn.execute("SELECT id, last_seq FROM messenger_chat")).fetchall()
        last_seq = {str(chat): seq for chat, seq in last}
        result["missed_per_client"] = per_chat * args.chats_per_user
        result["messages_committed_while_down"] = per_chat * len(chats)

        pg0 = postgres_cpu()
        restarted = time.time()
        hub = await start_daphne()
        cpu0 = connections.cpu_of(hub.proc.pid)

        def all_back() -> bool:
            ticks = [p.ticks[-1] for p in procs if p.ticks]
            fresh = all(t["t"] > restarted + 1 for t in ticks)
            return fresh and sum(t["connected"] for t in ticks) == args.clients

        back = await storm.until(all_back, args.deadline)
        result["all_connected_s"] = round(time.time() - restarted, 1) if back else None
        caught_up_s = None
        while time.time() - restarted < args.deadline:
            reports = await asyncio.gather(*(p.report(last_seq) for p in procs))
            if sum(r["missing"] for r in reports) == 0:
                caught_up_s = round(time.time() - restarted, 1)
                break
            await asyncio.sleep(1.0)
        hub_cpu = connections.cpu_of(hub.proc.pid) - cpu0
        pg_cpu = postgres_cpu() - pg0
        reports = await asyncio.gather(*(p.report(last_seq) for p in procs))
        ticks = [t for p in procs for t in p.ticks if t["t"] > restarted]
        recover_ms = sorted(ms for t in ticks for ms in t["recoverMs"])
        result.update(
            {
                "all_caught_up_s": caught_up_s,
                "missing_at_end": sum(r["missing"] for r in reports),
                "hub_cpu_s": round(hub_cpu, 1),
                "postgres_cpu_s": round(pg_cpu, 1),
                "hub_cpu_ms_per_client": round(hub_cpu / args.clients * 1000, 2),
                "rest_requests": sum(r["restRequests"] for r in reports),
                "rest_resync_failures": sum(r["resyncFailures"] for r in reports),
                "recoveries": sum(r["recoveries"] for r in reports),
                "recover_failures": sum(r["recoverFailures"] for r in reports),
                "streams_told_to_resync": sum(r["recoverResyncs"] for r in reports),
                "recover_p50_ms": connections.quantile(recover_ms, 0.5) if recover_ms else None,
                "recover_p95_ms": connections.quantile(recover_ms, 0.95) if recover_ms else None,
                "gave_up": sum(r["closed"] for r in reports),
                "shed_503": storm.shed_count(port),
            }
        )
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    modes = ["recover", "rest"] if args.mode == "both" else [args.mode]
    report: dict[str, Any] = {
        "clients": args.clients,
        "chats_per_user": args.chats_per_user,
        "members_per_chat": args.members,
        "runs": [],
    }
    for mode in modes:
        report["runs"].append(await catch_up(args, mode))
    report["host_load"] = os.getloadavg()[0]
    report["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--chats-per-user", type=int, default=20)
    parser.add_argument("--members", type=int, default=100, help="members per chat")
    parser.add_argument("--missed", type=int, default=100, help="messages missed per client")
    parser.add_argument("--procs", type=int, default=4, help="Node client processes")
    parser.add_argument("--mode", choices=["recover", "rest", "both"], default="both")
    parser.add_argument("--deadline", type=float, default=600.0, help="s to wait for catch-up")
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.members, args.procs = 400, 40, 2
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
