"""Isolation benchmarks through a real Daphne and a real worker (issue 12):

- fairness: a 10,000-message burst committed at once into one chat while another chat
  gets 10 msg/s; the quiet chat's commit -> hub client latency, and the burst's drain time;
- priority: call invitations committed every 0.5 s during a 100,000-row backlog; each
  invitation's commit -> callee latency;
- urgent: 20,000 ConferenceEnded rows of one conference committed at once (urgent kinds
  are claimed ahead of a backlog) while another chat gets 10 msg/s; that chat's commit ->
  client latency, and the flood's drain time.

    .venv/bin/python bench/isolation.py [--repo PATH] [--quick]

--repo runs Daphne and the worker from another checkout (an older commit, to compare with
"today"); the benchmark itself only speaks SQL, JWT and the SignalR JSON protocol, so it
works against any version. Own database (messenger_bench_isolation) and Redis db 8.
Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import psycopg
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.hubclients import free_port, sibling_url  # noqa: E402

DATABASE_URL = sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_isolation"
)
REDIS_URL = sibling_url("REDIS_URL", "redis://127.0.0.1:6379/0", "/8")
RS = "\x1e"

# One message and its MessageReceived row, as post_message() writes them (one statement).
SEND_SQL = """
WITH c AS (UPDATE messenger_chat SET last_seq = last_seq + %(n)s WHERE id = %(chat)s
           RETURNING id, last_seq - %(n)s AS base),
m AS (INSERT INTO messenger_message (id, chat_id, seq, sender_id, kind, body, card_text, sent_at)
      SELECT gen_random_uuid(), c.id, c.base + g, %(sender)s, 'Text', 'x', '', now()
      FROM c, generate_series(1, %(n)s) g RETURNING id, chat_id, seq),
o AS (INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id, seq,
        status, attempts, next_attempt_at, created_at, updated_at, row_version)
      SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', chat_id, id, seq, 'Pending', 0,
             now(), now(), now(), 0 FROM m RETURNING 1)
SELECT count(*), pg_notify('realtime_outbox', '') FROM o
"""

# A ringing 1:1 call and its CallInvited row for the callee, as start_call() writes them.
INVITE_SQL = """
WITH s AS (INSERT INTO messenger_callsession (id, session_kind, room_name, status, created_at,
             callee_id, initiator_id, chat_id)
           VALUES (%(call)s, 'Direct', %(room)s, 'Ringing', now(), %(callee)s, %(caller)s,
                   %(chat)s) RETURNING id),
o AS (INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id,
        session_kind, status, attempts, next_attempt_at, created_at, updated_at, row_version)
      SELECT gen_random_uuid(), 'CallInvited', 'User', %(callee)s, id, 'Direct', 'Pending', 0,
             now(), now(), now(), 0 FROM s RETURNING 1)
SELECT pg_notify('realtime_outbox', '') FROM o
"""


# A conference that ended, and `n` ConferenceEnded rows of it for its chat (one flood).
FLOOD_SQL = """
WITH s AS (INSERT INTO messenger_callsession (id, session_kind, room_name, status, created_at,
             ended_at, initiator_id, chat_id)
           VALUES (%(call)s, 'Conference', %(room)s, 'Ended', now(), now(), %(user)s, %(chat)s)
           RETURNING id),
o AS (INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, ref_id,
        session_kind, status, attempts, next_attempt_at, created_at, updated_at, row_version)
      SELECT gen_random_uuid(), 'ConferenceEnded', 'ChatGroup', %(chat)s, s.id, 'Conference',
             'Pending', 0, now(), now(), now(), 0 FROM s, generate_series(1, %(n)s) RETURNING 1)
SELECT count(*), pg_notify('realtime_outbox', '') FROM o
"""


PENDING_BURST_SQL = """
SELECT 1 FROM messenger.realtime_outbox WHERE status = 'Pending' AND chat_id = %(chat)s LIMIT 1
"""


def sql(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> Any:
    return conn.execute(statement, params).fetchall()


def prepare(repo: Path) -> dict[str, Any]:
    """A fresh database migrated by `repo`'s code, with the users and chats the runs use."""
    admin = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS messenger_bench_isolation WITH (FORCE)")
        conn.execute("CREATE DATABASE messenger_bench_isolation")
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=repo, env=env, check=True)
    ids = {name: uuid.uuid4() for name in ("alice", "bob", "carol", "caller", "callee")}
    chats = {name: uuid.uuid4() for name in ("burst", "quiet", "direct")}
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        for name, user in ids.items():
            conn.execute(
                "INSERT INTO messenger_user (id, password, is_superuser, username, first_name,"
                " last_name, email, is_staff, is_active, date_joined, display_name)"
                " VALUES (%s, '!', false, %s, '', '', '', false, true, now(), '')",
                (user, name),
            )
        members = {"burst": ["alice"], "quiet": ["bob"], "direct": ["caller", "callee"]}
        for name, chat in chats.items():
            conn.execute(
                "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
                " VALUES (%s, 'Group', %s, 0, now(), now())",
                (chat, name),
            )
            for member in members[name]:
                conn.execute(
                    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active,"
                    " last_read_seq, joined_at) VALUES (gen_random_uuid(), %s, %s, true, 0, now())",
                    (chat, ids[member]),
                )
    return {"users": ids, "chats": chats}


class Stack:
    """Daphne and one worker from `repo`, on the benchmark's database and Redis."""

    def __init__(self, repo: Path) -> None:
        self.port = free_port()
        env = dict(
            os.environ,
            DATABASE_URL=DATABASE_URL,
            REDIS_URL=REDIS_URL,
            LOG_LEVEL=os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            MESSENGER_REALTIME_METRICS_PORT="0",
        )
        daphne = str(Path(sys.executable).with_name("daphne"))
        argv = [daphne, "-b", "127.0.0.1", "-p", str(self.port), "project.asgi:application"]
        self.procs = [
            subprocess.Popen(
                argv, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ),
            subprocess.Popen([sys.executable, "manage.py", "dispatch_realtime"], cwd=repo, env=env),
        ]
        sys.path.insert(0, str(repo))
        os.environ.update(DATABASE_URL=DATABASE_URL, DJANGO_SETTINGS_MODULE="project.settings")
        from django.conf import settings

        self.key = settings.MESSENGER_REALTIME["JWT_SIGNING_KEY"]

    def token(self, user: uuid.UUID) -> str:
        now = int(time.time())
        claims = {"sub": str(user), "iss": "messenger", "aud": "messenger-realtime"}
        return jwt.encode({**claims, "iat": now, "exp": now + 3600}, self.key, algorithm="HS256")

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            proc.kill()


class Client:
    """A raw SignalR JSON client that timestamps every event it receives."""

    def __init__(self, stack: Stack, user: uuid.UUID) -> None:
        self.url = f"ws://127.0.0.1:{stack.port}/hubs/messenger?access_token={stack.token(user)}"
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.ready = asyncio.Event()

    async def run(self) -> None:
        async with websockets.connect(self.url, max_size=None) as ws:
            await ws.send(json.dumps({"protocol": "json", "version": 1}) + RS)
            async for frame in ws:
                now = time.time()
                for record in str(frame).split(RS):
                    if not record:
                        continue
                    message = json.loads(record)
                    if message == {}:
                        self.ready.set()
                    elif message.get("type") == 1:
                        self.events.append((now, message["target"], message["arguments"][0]))
                    elif message.get("type") == 6:
                        await ws.send('{"type":6}' + RS)


async def connect(stack: Stack, *users: uuid.UUID) -> tuple[list[Client], list[asyncio.Task[None]]]:
    clients = [Client(stack, user) for user in users]
    deadline = time.monotonic() + 30
    tasks: list[asyncio.Task[None]] = []
    for client in clients:
        while True:  # Daphne may still be starting
            task = asyncio.create_task(client.run())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(client.ready.wait()), 1.0)
            if client.ready.is_set():
                tasks.append(task)
                break
            task.cancel()
            if time.monotonic() > deadline:
                raise RuntimeError("the hub did not accept a client within 30 s")
    return clients, tasks


def pctl(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 1)


def quiet_figures(sent: dict[int, float], quiet: Client) -> dict[str, Any]:
    """The quiet chat's commit -> client latency: `sent` maps each seq to its commit."""
    lag = [t - sent[e["seq"]] for t, _, e in quiet.events if e["seq"] in sent]
    return {
        "quiet_sent": len(sent),
        "quiet_received": len(lag),
        "quiet_p50_ms": pctl(lag, 50),
        "quiet_p95_ms": pctl(lag, 95),
        "quiet_max_ms": round(max(lag) * 1000, 1),
    }


async def fairness(stack: Stack, ids: dict[str, Any], burst: int, quiet_rate: float) -> Any:
    users, chats = ids["users"], ids["chats"]
    (alice, bob), tasks = await connect(stack, users["alice"], users["bob"])
    sent: dict[int, float] = {}
    pushed = float("nan")  # when the worker had pushed the whole burst (rows Done)
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        started = time.time()
        sql(conn, SEND_SQL, {"n": burst, "chat": chats["burst"], "sender": users["carol"]})
        committed = time.time()
        seq = 0
        while len(alice.events) < burst and time.time() - committed < 120:
            seq += 1
            sql(conn, SEND_SQL, {"n": 1, "chat": chats["quiet"], "sender": users["carol"]})
            sent[seq] = time.time()
            if pushed != pushed and not sql(conn, PENDING_BURST_SQL, {"chat": chats["burst"]}):
                pushed = time.time()
            await asyncio.sleep(1 / quiet_rate)
    await asyncio.sleep(2)  # the quiet chat's last events
    for task in tasks:
        task.cancel()
    drained = max((t for t, _, _ in alice.events), default=float("nan")) - committed
    return {
        "burst": burst,
        "burst_commit_s": round(committed - started, 3),
        "burst_received": len(alice.events),
        "burst_pushed_s": round(pushed - committed, 3),
        "burst_drain_s": round(drained, 3),
        "burst_rate_per_s": round(len(alice.events) / drained),
        **quiet_figures(sent, bob),
    }


async def urgent(stack: Stack, ids: dict[str, Any], flood: int, quiet_rate: float) -> Any:
    users, chats = ids["users"], ids["chats"]
    (alice, bob), tasks = await connect(stack, users["alice"], users["bob"])
    sent: dict[int, float] = {}
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        call = uuid.uuid4()
        params = {"call": call, "room": f"room-{call}", "user": users["alice"]}
        sql(conn, FLOOD_SQL, {**params, "chat": chats["burst"], "n": flood})
        committed = time.time()
        seq = 0
        while len(alice.events) < flood and time.time() - committed < 120:
            seq += 1
            sql(conn, SEND_SQL, {"n": 1, "chat": chats["quiet"], "sender": users["carol"]})
            sent[seq] = time.time()
            await asyncio.sleep(1 / quiet_rate)
    await asyncio.sleep(2)  # the quiet chat's last events
    for task in tasks:
        task.cancel()
    drained = max((t for t, _, _ in alice.events), default=float("nan")) - committed
    return {
        "flood": flood,
        "flood_received": len(alice.events),
        "flood_drain_s": round(drained, 3),
        **quiet_figures(sent, bob),
    }


async def priority(stack: Stack, ids: dict[str, Any], backlog: int, invites: int) -> Any:
    users, chats = ids["users"], ids["chats"]
    (callee,), tasks = await connect(stack, users["callee"])
    sent: dict[str, float] = {}
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        sql(conn, SEND_SQL, {"n": backlog, "chat": chats["burst"], "sender": users["carol"]})
        for _ in range(invites):
            call = uuid.uuid4()
            params = {"call": call, "room": f"room-{call}", "callee": users["callee"]}
            sql(conn, INVITE_SQL, {**params, "caller": users["caller"], "chat": chats["direct"]})
            sent[str(call)] = time.time()
            await asyncio.sleep(0.5)
    deadline = time.time() + 120
    while len([e for e in callee.events if e[1] == "call_invited"]) < invites:
        if time.time() > deadline:
            break
        await asyncio.sleep(0.1)
    for task in tasks:
        task.cancel()
    lag = [t - sent[e["callId"]] for t, name, e in callee.events if name == "call_invited"]
    return {
        "backlog": backlog,
        "invites": invites,
        "received": len(lag),
        "invite_p50_ms": pctl(lag, 50),
        "invite_p95_ms": pctl(lag, 95),
        "invite_max_ms": round(max(lag) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", type=Path, default=ROOT, help="checkout to run the stack from")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument(
        "--only", choices=["fairness", "priority", "urgent"], help="run one scenario"
    )
    args = parser.parse_args()
    burst, backlog, invites = (1000, 5000, 4) if args.quick else (10_000, 100_000, 20)
    flood = 1000 if args.quick else 20_000
    results: dict[str, Any] = {"repo": str(args.repo)}
    for name, run in (
        ("fairness", lambda s, i: fairness(s, i, burst, 10.0)),
        ("priority", lambda s, i: priority(s, i, backlog, invites)),
        ("urgent", lambda s, i: urgent(s, i, flood, 10.0)),
    ):
        if args.only not in (None, name):
            continue
        ids = prepare(args.repo)
        stack = Stack(args.repo)
        try:
            results[name] = asyncio.run(run(stack, ids))
        finally:
            stack.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
