"""What presence costs one Daphne (issue 48): watching, and each change told.

    .venv/bin/python bench/presence.py [--users N] [--watch W] [--changes K]
        [--procs P] [--concurrency C] [--idle S] [--quick]

N users (default 10,000) in chats of W + 1 (default W = 50), each connected once to one
real Daphne (negotiate, the WebSocket, the JSON handshake: bench/connections.py's
path) and watching the W others of its chat (`WatchPresence`). Redis is a private
redis-server of the bench's own, so its command counts are this run's alone. Measured:

- connect + watch: Daphne's CPU per connection (the connect as bench/connections.py
  measures it, plus the watch call), the watch call's latency, Redis commands per
  connection;
- idle: Daphne's CPU per connection per second and RSS per connection, watching;
- a change: K users (default 200) leave (their last device closes: offline) and come
  back (online): per change, the `presence` events the watchers got (W expected: one
  per watcher, whatever their chats), the channel-layer messages Daphne received
  (one per watching process: here 1), Redis commands, Daphne's CPU.

Prints JSON. The issue's bounds: connect ≤ 3 CPU-ms, idle ≤ 0.01 CPU-ms/s and
≤ 20 KB per connection; the fan-out per change is W events and one layer message per
watching process.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

RS = "\x1e"

# Users 0 .. N-1 by username; users k*(W+1) .. k*(W+1)+W share chat k.
SEED_SQL = [
    "TRUNCATE messenger.realtime_outbox",
    "TRUNCATE messenger_chat, messenger_user CASCADE",
    "INSERT INTO messenger_user (id, password, is_superuser, username, first_name, last_name,"
    " email, is_staff, is_active, date_joined, display_name) SELECT gen_random_uuid(), '!',"
    " false, 'pres' || lpad(g::text, 6, '0'), '', '', '', false, true, now(), ''"
    " FROM generate_series(0, %(users)s - 1) g",
    "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
    " SELECT gen_random_uuid(), 'Group', 'pres ' || lpad(g::text, 6, '0'), 0, now(), now()"
    " FROM generate_series(0, (%(users)s - 1) / %(group)s) g",
    # Members who talked (took_part): each may see the others' presence.
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, took_part,"
    " last_read_seq, joined_at) SELECT gen_random_uuid(), c.id, u.id, true, true, 0, now()"
    " FROM (SELECT id, row_number() OVER (ORDER BY title) - 1 AS k FROM messenger_chat) c"
    " JOIN (SELECT id, row_number() OVER (ORDER BY username) - 1 AS k FROM messenger_user) u"
    "   ON u.k / %(group)s = c.k",
    # One big chat besides: its first %(big)s users (the typing burst's).
    "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
    " VALUES (gen_random_uuid(), 'Group', 'pres big', 0, now(), now())",
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, took_part,"
    " last_read_seq, joined_at) SELECT gen_random_uuid(),"
    " (SELECT id FROM messenger_chat WHERE title = 'pres big'), u.id, true, true, 0, now()"
    " FROM (SELECT id FROM messenger_user ORDER BY username LIMIT %(big)s) u",
    "ANALYZE",
]


# -- the client processes (this file run with --client) -----------------------------------


class Watchers:
    """One process's connections: each connects, watches its list, and counts what comes."""

    def __init__(self, http: str, concurrency: int) -> None:
        self.http, self.gate = http, asyncio.Semaphore(concurrency)
        self.sockets: dict[str, Any] = {}  # token -> its open WebSocket
        self.watch_latencies: list[float] = []
        self.presence_events = 0
        self.typing_events = 0
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.pings: dict[str, asyncio.Task[None]] = {}

    async def open(self, token: str, watch: list[str]) -> None:
        from bench.connections import connect

        async with self.gate:
            ws = await connect(self.http, token, deflate=False, messagepack=False)  # JSON
            started = time.monotonic()
            invocation = {"type": 1, "invocationId": "w", "target": "WatchPresence"}
            await ws.send(json.dumps({**invocation, "arguments": [watch]}) + RS)
            while True:  # its completion (a presence event may come first)
                text = await asyncio.wait_for(ws.recv(), 60)
                records = [json.loads(r) for r in str(text).split(RS)[:-1]]
                self.presence_events += sum(r.get("target") == "presence" for r in records)
                done = [r for r in records if r.get("type") == 3]
                if done:
                    if "error" in done[0]:
                        raise RuntimeError(done[0]["error"])
                    break
            self.watch_latencies.append(time.monotonic() - started)
            self.sockets[token] = ws
            self.tasks[token] = asyncio.create_task(self.listen(ws))
            self.pings[token] = asyncio.create_task(self.keepalive(ws))

    async def listen(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):
            async for frame in ws:
                text = frame if isinstance(frame, str) else frame.decode()
                if '"presence"' in text:
                    self.presence_events += text.count('"target":"presence"')
                if '"typing"' in text:
                    self.typing_events += text.count('"target":"typing"')

    async def keepalive(self, ws: Any) -> None:
        """The official clients' Ping every 15 s: without it the hub ends a connection
        it has not heard from for CLIENT_TIMEOUT."""
        from websockets.exceptions import ConnectionClosed

        from bench.connections import PING_EVERY, PINGS

        await asyncio.sleep(random.uniform(0, PING_EVERY))  # spread the clients' pings
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(PINGS[False])  # JSON's
                await asyncio.sleep(PING_EVERY)  # a period, not synchronisation

    async def close(self, tokens: list[str]) -> None:
        for token in tokens:
            self.tasks.pop(token).cancel()
            self.pings.pop(token).cancel()
        await asyncio.gather(*(self.sockets.pop(t).close() for t in tokens))


def reply(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def client_main() -> None:
    stdin = asyncio.StreamReader(limit=2**26)
    protocol = asyncio.StreamReaderProtocol(stdin)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    config = json.loads(await stdin.readline())
    watchers = Watchers(config["http"], config["concurrency"])
    lists: dict[str, list[str]] = config["watch"]
    opened = await asyncio.gather(
        *(watchers.open(token, lists[token]) for token in config["tokens"]),
        return_exceptions=True,
    )
    errors = sorted({repr(e) for e in opened if isinstance(e, BaseException)})
    reply({"ready": len(watchers.sockets), "errors": errors[:5], "watch": watchers.watch_latencies})
    while line := await stdin.readline():
        command = json.loads(line)
        if command["cmd"] == "status":
            reply(
                {
                    "presence_events": watchers.presence_events,
                    "typing_events": watchers.typing_events,
                }
            )
        elif command["cmd"] == "type":  # Typing in a chat, as a send (no completion)
            frame = json.dumps({"type": 1, "target": "Typing", "arguments": [command["chat"]]}) + RS
            mine = [watchers.sockets[t] for t in command["tokens"] if t in watchers.sockets]
            sent = await asyncio.gather(*(ws.send(frame) for ws in mine), return_exceptions=True)
            reply({"typed": sum(x is None for x in sent)})
        elif command["cmd"] == "leave":
            await watchers.close(command["tokens"])
            reply({"left": len(command["tokens"])})
        elif command["cmd"] == "come_back":
            back = await asyncio.gather(
                *(watchers.open(t, lists[t]) for t in command["tokens"]), return_exceptions=True
            )
            reply({"back": sum(b is None for b in back)})
    for task in [*watchers.tasks.values(), *watchers.pings.values()]:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in watchers.sockets.values()), return_exceptions=True)


# -- the benchmark ---------------------------------------------------------------------


class RedisServer:
    """A redis-server of the bench's own: its command counts are this run's alone."""

    def __init__(self) -> None:
        from bench import hubclients

        self.port = hubclients.free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-presence-redis-")
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--maxclients",
                "20000",
            ],
            stdout=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def commands(self) -> int:
        import redis

        client = redis.Redis.from_url(self.url)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                return int(client.info("stats")["total_commands_processed"])
            time.sleep(0.05)  # the server starting (not synchronisation of the bench)
        raise RuntimeError("the bench's redis-server does not answer")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.1)  # polling the clients' counts (not synchronisation)
    return False


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    from bench import e2e, hubclients
    from bench.connections import (
        FD_HEADROOM,
        ClientProcess,
        cpu_of,
        quantile,
        raise_file_limit,
        rss_kib,
    )

    database_url = os.environ.get("PRESENCE_DATABASE_URL") or hubclients.sibling_url(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_presence"
    )
    limits = raise_file_limit(args.users * 2 + FD_HEADROOM)
    redis_server = RedisServer()
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_server.url}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    # Per-user limits as a deployment of this many users would set them: the bench's one
    # machine is many users.
    env.update(MESSENGER_REALTIME_RATE_LIMIT_CONNECTS="100000")
    group = args.watch + 1
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(redis_server.stop)
        await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
        await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
        conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        stack.push_async_callback(conn.close)
        for statement in SEED_SQL:
            await conn.execute(
                statement, {"users": args.users, "group": group, "big": args.big_chat}
            )
        users = [
            str(row[0])
            for row in await (
                await conn.execute("SELECT id FROM messenger_user ORDER BY username")
            ).fetchall()
        ]
        tokens = {u: t for u, t in hubclients.mint_tokens(users).items()}  # type: ignore[arg-type]
        watch = {
            tokens[u]: [v for v in users[(n // group) * group : (n // group + 1) * group] if v != u]
            for n, u in enumerate(users)
        }
        port = hubclients.free_port()
        http = f"http://127.0.0.1:{port}"
        argv = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
        daphne_env = dict(env)
        recheck_count = Path(tempfile.mkdtemp(prefix="bench-recheck-")) / "reads"
        if args.recheck:  # every change checked against the port (bench/recheck_hook)
            hook = ROOT / "bench" / "recheck_hook"
            daphne_env.update(PYTHONPATH=f"{hook}:{ROOT}")
            daphne_env.update(BENCH_PRESENCE_RECHECK=str(recheck_count))
        daphne = await hubclients.Service.start(
            "daphne-presence", [*argv, "project.asgi:application"], daphne_env, "Listening on TCP"
        )
        stack.push_async_callback(daphne.stop)
        pid = daphne.proc.pid

        # This file's own clients (ClientProcess.start would run bench/connections.py's).
        argv_client = [sys.executable, str(Path(__file__).resolve()), "--client"]
        pipe = asyncio.subprocess.PIPE
        clients: list[ClientProcess] = []
        for _ in range(args.procs):
            proc = await asyncio.create_subprocess_exec(
                *argv_client, cwd=ROOT, stdin=pipe, stdout=pipe, limit=2**28
            )
            clients.append(ClientProcess(proc))
            stack.push_async_callback(clients[-1].stop)
        ordered = [tokens[u] for u in users]
        shares = [ordered[i :: args.procs] for i in range(args.procs)]

        redis_before, cpu_before, rss_before = redis_server.commands(), cpu_of(pid), rss_kib(pid)
        started = time.monotonic()
        answers = await asyncio.gather(
            *(
                c.ask(
                    {
                        "http": http,
                        "tokens": share,
                        "concurrency": args.concurrency,
                        "watch": {t: watch[t] for t in share},
                    }
                )
                for c, share in zip(clients, shares, strict=True)
            )
        )
        wall = time.monotonic() - started
        ready = sum(a["ready"] for a in answers)
        cpu_open = cpu_of(pid) - cpu_before
        redis_open = redis_server.commands() - redis_before
        latencies = [x for a in answers for x in a["watch"]]
        result: dict[str, Any] = {
            "recheck": args.recheck,
            "users": args.users,
            "watching_each": args.watch,
            "file_limit": limits,
            "connected": ready,
            "errors": sorted({e for a in answers for e in a["errors"]})[:5],
            "connect_and_watch_wall_s": round(wall, 1),
            "connect_and_watch_cpu_ms_per_connection": round(cpu_open / max(ready, 1) * 1000, 2),
            "watch_latency_p50_ms": round(quantile(latencies, 0.5) * 1000, 1),
            "watch_latency_p95_ms": round(quantile(latencies, 0.95) * 1000, 1),
            "redis_commands_per_connection_and_watch": round(redis_open / max(ready, 1), 1),
        }

        async def events() -> int:
            counts = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
            return sum(c["presence_events"] for c in counts)

        await asyncio.sleep(5)  # past the connects' tail (not synchronisation)
        cpu_idle_start, idle_start = cpu_of(pid), time.monotonic()
        redis_idle_start = redis_server.commands()
        await asyncio.sleep(args.idle)  # the measured idle window
        idle_s = time.monotonic() - idle_start
        result.update(
            {
                "idle_cpu_ms_per_connection_per_s": round(
                    (cpu_of(pid) - cpu_idle_start) / max(ready, 1) / idle_s * 1000, 4
                ),
                "idle_redis_commands_per_s": round(
                    (redis_server.commands() - redis_idle_start) / idle_s, 1
                ),
                "rss_kib_per_connection": round((rss_kib(pid) - rss_before) / max(ready, 1), 1),
            }
        )

        # Changes: K users, spread over the chats, leave (offline), then come back (online).
        step = max(1, len(users) // args.changes)
        moving = users[::step][: args.changes]
        movers = {tokens[u] for u in moving}
        by_client = [[t for t in share if t in movers] for share in shares]
        # Each change is told to the mover's chat members who stay connected.
        staying = [
            sum(
                tokens[v] not in movers
                for v in users[(n // group) * group : (n // group + 1) * group]
            )
            for n in range(0, len(users), step)
        ][: args.changes]
        expected = sum(staying)

        async def checks() -> int:
            """The port reads presence checks made so far (bench/recheck_hook: --recheck)."""
            if not args.recheck:
                return 0
            await asyncio.sleep(0.5)  # the hook writes every 0.2 s (not synchronisation:
            return int(recheck_count.read_text() or 0)  # a count of what already ran)

        for phase, command, answer_key in (
            ("offline", "leave", "left"),
            ("online", "come_back", "back"),
        ):
            before_events, before_cpu = await events(), cpu_of(pid)
            before_redis, before_checks = redis_server.commands(), await checks()
            began = time.monotonic()
            replies = await asyncio.gather(
                *(
                    c.ask({"cmd": command, "tokens": mine})
                    for c, mine in zip(clients, by_client, strict=True)
                )
            )
            moved = sum(r[answer_key] for r in replies)

            async def told(before: int = before_events) -> bool:
                return await events() - before >= expected

            complete = await until(told, timeout=60)
            took = time.monotonic() - began
            await asyncio.sleep(2)  # anything told twice would come now (not synchronisation)
            got = await events() - before_events
            changes = max(moved, 1)
            result[phase] = {
                "changes": moved,
                "presence_events_per_change": round(got / changes, 2),
                "watchers_staying_per_change": round(expected / changes, 2),
                "all_told": complete,
                "told_within_s": round(took, 2),
                "redis_commands_per_change": round(
                    (redis_server.commands() - before_redis) / changes, 1
                ),
                "daphne_cpu_ms_per_change": round((cpu_of(pid) - before_cpu) / changes * 1000, 2),
                # With --recheck: the port reads the changes' checks made (one per change
                # and process when the watchers' checks share it: hub/presence/visibility.py).
                "presence_check_reads_per_change": round(
                    (await checks() - before_checks) / changes, 2
                ),
            }
        result["online"]["note"] = "includes each mover's connect and WatchPresence"

        # A typing burst: T members of the big chat type at once; each typing is for the
        # other members' connections, dropped first where one has something waiting.
        big = (
            await (
                await conn.execute("SELECT id FROM messenger_chat WHERE title = 'pres big'")
            ).fetchone()
        )[0]
        typists = {tokens[u] for u in users[: args.typists]}

        async def typed() -> int:
            counts = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
            return sum(c["typing_events"] for c in counts)

        before_typed, before_cpu = await typed(), cpu_of(pid)
        before_redis = redis_server.commands()
        await asyncio.gather(
            *(
                c.ask(
                    {"cmd": "type", "chat": str(big), "tokens": [t for t in share if t in typists]}
                )
                for c, share in zip(clients, shares, strict=True)
            )
        )
        offered = len(typists) * (args.big_chat - 1)

        async def settled(seen: list[int] = [-1]) -> bool:  # noqa: B006 (the last count)
            now = await typed()
            done = now == seen[0]
            seen[0] = now
            return done or now - before_typed >= offered

        await asyncio.sleep(0.5)  # the burst under way (not synchronisation)
        await until(settled, timeout=20)
        shown = await typed() - before_typed
        result["typing_burst"] = {
            "chat_members": args.big_chat,
            "typists": len(typists),
            "offered_deliveries": offered,
            "shown": shown,
            "dropped_as_volatile": offered - shown,
            "redis_commands": redis_server.commands() - before_redis,
            "daphne_cpu_ms": round((cpu_of(pid) - before_cpu) * 1000, 1),
            "daphne_cpu_ms_per_typist": round((cpu_of(pid) - before_cpu) * 1000 / len(typists), 2),
        }
    result["host_load"] = os.getloadavg()[0]
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


def main() -> None:
    if "--client" in sys.argv:
        asyncio.run(client_main())
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--watch", type=int, default=50, help="users each one watches")
    parser.add_argument("--changes", type=int, default=200, help="users who leave and return")
    parser.add_argument("--big-chat", type=int, default=500, help="members of the typing chat")
    parser.add_argument("--typists", type=int, default=50, help="who type in it at once")
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--concurrency", type=int, default=50, help="connects in flight each")
    parser.add_argument("--idle", type=float, default=20.0, help="s of idle measured")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="check every change against the port as if the watches were a minute old",
    )
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args()
    if args.quick:
        args.users, args.watch, args.changes, args.procs, args.idle = 204, 50, 8, 2, 3.0
        args.big_chat, args.typists = 100, 10
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
