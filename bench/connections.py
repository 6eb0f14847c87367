"""What a connection costs one Daphne: to open, to hold idle, and in memory (issue 27).

    .venv/bin/python bench/connections.py [--clients N] [--chats-per-user K]
        [--procs P] [--concurrency C] [--idle S] [--rate R] [--repo PATH] [--app APP]
        [--deflate] [--messagepack] [--quick]

N distinct users (default 500), each a member of K chats (default 5), connect to one
real Daphne through the whole path a SignalR client takes: POST negotiate (version 1,
bearer token), the WebSocket upgrade with the connection token, the JSON handshake (the
hub joins the user's and the chats' groups before it answers). The clients are raw
WebSocket clients in P processes of their own (default 4, C connects in flight each),
and ping every 15 s as the official clients do. Measured from /proc:

- open: Daphne's CPU per connection opened (the whole connect phase / N), and how many
  connects per second one Daphne admitted (N / the phase's wall time: the clients keep
  C * P connects in flight, enough to keep Daphne at a full core);
- hold: Daphne's CPU per idle connection per second, over S seconds (default 60) of
  nothing but pings, and its RSS per connection (the growth from before the connects);
- deliver (with --rate R): events published through the channel layer at R per second
  into the users' chats while the N connections are held; p95 lag publish -> receipt,
  Daphne's CPU and the bytes the clients' sockets received (TCP payload, from the
  kernel's TCP_INFO: frames, headers and all) per delivery. Each event is a
  `message_received` as the worker builds it (contracts/chat.py, with its stream and
  offset), its body drawn from BODIES (the same draws every run).

`--deflate`: the clients offer permessage-deflate (as browsers and the official
JavaScript client do); `--messagepack`: they speak
the MessagePack hub protocol instead of JSON (issue 49, item 4: bytes on the wire).

Daphne's file limit bounds N: the script raises its own soft limit to the hard one
(inherited by Daphne and the clients) and says so when N cannot fit. `--repo` serves
Daphne from another checkout (an older commit, for "before"). Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

RS = "\x1e"
HANDSHAKES = {
    False: json.dumps({"protocol": "json", "version": 1}) + RS,
    True: json.dumps({"protocol": "messagepack", "version": 1}) + RS,
}
# Byte for byte what the official clients send: JSON text, MessagePack binary.
PINGS: dict[bool, str | bytes] = {False: '{"type":6}' + RS, True: b"\x02\x91\x06"}
# Chat messages of the lengths people write (--rate's events draw from these).
BODIES = [
    "ok",
    "see you at 5",
    "Thanks! I'll take a look after lunch.",
    "Привет! Созвонимся завтра в десять, обсудим план релиза.",
    "Can you send me the latest version of the deck? The one from Tuesday had the old "
    "numbers in the revenue table.",
    "Here is the summary of today's meeting: we agreed to ship the realtime hub next week, "
    "after the load tests pass on staging; Anna owns the rollout, Boris the docs, and we "
    "meet again on Thursday to decide on the default settings.",
]
TCP_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in Linux's struct tcp_info
PING_EVERY = 15.0  # the official clients' keep-alive interval
FD_HEADROOM = 200  # Daphne's own files: its listening socket, Redis, PostgreSQL, logs

# Users k .. in username order; user k joins chats k, k+1, ..., k+K-1 (mod N), so every
# chat has K members and every user K chats.
SEED_SQL = [
    "TRUNCATE messenger.realtime_outbox",
    "TRUNCATE messenger_chat, messenger_user CASCADE",
    "INSERT INTO messenger_user (id, password, is_superuser, username, first_name, last_name,"
    " email, is_staff, is_active, date_joined, display_name) SELECT gen_random_uuid(), '!',"
    " false, 'conn' || lpad(g::text, 6, '0'), '', '', '', false, true, now(), ''"
    " FROM generate_series(0, %(users)s - 1) g",
    "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
    " SELECT gen_random_uuid(), 'Group', 'conn ' || lpad(g::text, 6, '0'), 0, now(), now()"
    " FROM generate_series(0, %(users)s - 1) g",
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, last_read_seq, joined_at)"
    " SELECT gen_random_uuid(), c.id, u.id, true, 0, now()"
    " FROM (SELECT id, row_number() OVER (ORDER BY title) - 1 AS k FROM messenger_chat) c"
    " JOIN (SELECT id, row_number() OVER (ORDER BY username) - 1 AS k FROM messenger_user) u"
    "   ON (c.k - u.k + %(users)s) %% %(users)s < %(chats)s",
    "ANALYZE",
]


# -- the client processes (this file run with --client) -----------------------------------


async def negotiate(http: str, token: str) -> str:
    """POST negotiate over a plain HTTP/1.1 connection: the connectionToken."""
    url = urlsplit(http)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            (
                "POST /hubs/messenger/negotiate?negotiateVersion=1 HTTP/1.1\r\n"
                f"Host: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n"
            ).encode()
        )
        response = await reader.read()
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        retry = next(
            (
                line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"retry-after:")
            ),
            None,
        )
        raise Refused(int(status), float(retry) if retry else None)
    return str(json.loads(body)["connectionToken"])


class Refused(Exception):
    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"negotiate answered {status}")
        self.status, self.retry_after = status, retry_after


async def connect(http: str, token: str, deflate: bool, messagepack: bool) -> Any:
    from websockets.asyncio.client import connect as ws_connect

    connection_token = await negotiate(http, token)
    url = http.replace("http", "ws", 1) + f"/hubs/messenger?id={connection_token}"
    ws = await ws_connect(
        url,
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=60,
        ping_interval=None,  # SignalR pings, not WebSocket ones
        compression="deflate" if deflate else None,
        max_queue=None,
    )
    await ws.send(HANDSHAKES[messagepack])
    answer = await asyncio.wait_for(ws.recv(), 30)
    if answer not in ("{}" + RS, b"{}" + RS.encode()):
        raise RuntimeError(f"handshake refused: {answer!r}")
    return ws


def bytes_received(ws: Any) -> int:
    """What the kernel received on this connection's socket (TCP payload), ever."""
    import socket
    import struct

    sock = ws.transport.get_extra_info("socket")
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_BYTES_RECEIVED + 8)
    return int(struct.unpack_from("Q", info, TCP_BYTES_RECEIVED)[0])


def message_ids(frame: str | bytes) -> list[str]:
    """The messageIds of the message_received records of one frame, JSON or MessagePack."""
    if isinstance(frame, str):
        return [
            json.loads(record)["arguments"][0]["messageId"]
            for record in frame.split(RS)[:-1]
            if '"message_received"' in record
        ]
    import msgpack

    found, offset = [], 0
    while offset < len(frame):
        size, shift = 0, 0
        while True:  # each record starts with its length, a varint
            byte, offset = frame[offset], offset + 1
            size, shift = size | (byte & 0x7F) << shift, shift + 7
            if not byte & 0x80:
                break
        message = msgpack.unpackb(frame[offset : offset + size], timestamp=3)
        offset += size
        if message[0] == 1 and message[3] == "message_received":
            found.append(message[4][0]["messageId"])
    return found


class Client:
    def __init__(self, http: str, concurrency: int, deflate: bool, messagepack: bool) -> None:
        self.http, self.gate = http, asyncio.Semaphore(concurrency)
        self.deflate, self.messagepack = deflate, messagepack
        self.sockets: list[Any] = []
        self.latencies: list[float] = []
        self.shed = 0  # negotiate answered 503 (admission control): retried after Retry-After
        self.received: dict[str, float] = {}  # messageId -> first receipt (unix time)
        self.receipts = 0
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, token: str) -> None:
        for attempt in range(5):
            async with self.gate:
                started = time.monotonic()
                try:
                    ws = await connect(self.http, token, self.deflate, self.messagepack)
                except Refused as exc:
                    if exc.status != 503 or attempt == 4:
                        raise
                    self.shed += 1
                    wait = exc.retry_after or 1.0
                else:
                    self.latencies.append(time.monotonic() - started)
                    self.sockets.append(ws)
                    self.tasks.append(asyncio.create_task(self.listen(ws)))
                    self.tasks.append(asyncio.create_task(self.keepalive(ws)))
                    return
            await asyncio.sleep(wait * random.uniform(1, 1.5))  # the client's own retry wait

    async def listen(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        marker = b"message_received" if self.messagepack else "message_received"
        with contextlib.suppress(ConnectionClosed):
            async for frame in ws:
                if marker not in frame:
                    continue
                at = time.time()
                for message in message_ids(frame):
                    self.receipts += 1
                    self.received.setdefault(message, at)

    async def keepalive(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        await asyncio.sleep(random.uniform(0, PING_EVERY))  # spread the clients' pings
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(PINGS[self.messagepack])
                await asyncio.sleep(PING_EVERY)  # a period, not synchronisation


def reply(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def client_main() -> None:
    stdin = asyncio.StreamReader(limit=2**26)
    protocol = asyncio.StreamReaderProtocol(stdin)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    config = json.loads(await stdin.readline())
    client = Client(config["http"], config["concurrency"], config["deflate"], config["messagepack"])
    started = time.time()
    opened = await asyncio.gather(
        *(client.open(token) for token in config["tokens"]), return_exceptions=True
    )
    errors = sorted({repr(e) for e in opened if isinstance(e, BaseException)})
    reply(
        {
            "ready": len(client.sockets),
            "errors": errors[:5],
            "started": started,
            "finished": time.time(),
            "latencies": client.latencies,
            "shed": client.shed,
        }
    )
    while line := await stdin.readline():
        command = json.loads(line)
        if command["cmd"] == "status":
            closed = sum(ws.close_code is not None for ws in client.sockets)
            deflated = sum(
                "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
                for ws in client.sockets
            )
            received = sum(bytes_received(ws) for ws in client.sockets if ws.close_code is None)
            reply(
                {
                    "closed": closed,
                    "receipts": client.receipts,
                    "deflated": deflated,
                    "bytes_received": received,
                }
            )
        elif command["cmd"] == "collect":
            received, client.received = client.received, {}
            reply({"received": received, "receipts": client.receipts})
    for task in client.tasks:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in client.sockets), return_exceptions=True)


# -- the benchmark ---------------------------------------------------------------------


def raise_file_limit(wanted: int) -> dict[str, Any]:
    """Raise this process's soft file limit towards `wanted` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return {"soft": max(soft, target), "hard": hard, "wanted": wanted}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_of(pid: int) -> float:
    from bench import hubclients

    return sum(hubclients.cpu_sample({"p": [pid]})["p"].values())


class ClientProcess:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls) -> "ClientProcess":
        argv = [sys.executable, str(Path(__file__).resolve()), "--client"]
        pipe = asyncio.subprocess.PIPE
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, stdin=pipe, stdout=pipe, limit=2**28
        )
        return cls(proc)

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        await self.proc.stdin.drain()
        if not (line := await self.proc.stdout.readline()):
            raise RuntimeError("a client process exited")
        return dict(json.loads(line))

    async def stop(self) -> None:
        from bench import hubclients

        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        await hubclients.stop_process(self.proc, terminate=False)


async def snapshot(pid: int, traces: Path, n: int) -> None:
    """Ask Daphne's tracemalloc hook for snapshot `n` and wait until it is written."""
    os.kill(pid, signal.SIGUSR1)
    for _ in range(1200):
        if (traces / f"{n}.done").exists():
            return
        await asyncio.sleep(0.1)  # polling for the file the hook writes (not synchronisation)
    raise RuntimeError("no tracemalloc snapshot from Daphne")


def memory_by_site(traces: Path, connections: int, top: int = 25) -> list[str]:
    """Bytes per connection allocated (and still held) between the two snapshots, by
    the innermost frame outside the standard library's asyncio and Python's internals."""
    import tracemalloc

    before = tracemalloc.Snapshot.load(str(traces / "0.snapshot"))
    after = tracemalloc.Snapshot.load(str(traces / "1.snapshot"))
    lines = []
    total = 0
    for stat in after.compare_to(before, "lineno"):
        total += stat.size_diff
    lines.append(f"total {total / max(connections, 1):.0f} B per connection")
    for stat in after.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        lines.append(f"{stat.size_diff / max(connections, 1):8.0f} B  {where}")
    return lines


def quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def connect_all(
    http: str,
    tokens: list[str],
    procs: int,
    concurrency: int,
    stack: contextlib.AsyncExitStack,
    args: argparse.Namespace,
) -> tuple[list[ClientProcess], list[dict[str, Any]]]:
    clients = [await ClientProcess.start() for _ in range(procs)]
    for client in clients:
        stack.push_async_callback(client.stop)
    shares = [tokens[i::procs] for i in range(procs)]
    config = {"http": http, "concurrency": concurrency}
    config.update(deflate=args.deflate, messagepack=args.messagepack)
    answers = await asyncio.gather(
        *(c.ask({**config, "tokens": share}) for c, share in zip(clients, shares, strict=True))
    )
    return clients, answers


def message_received(chat_id: Any, n: int, draw: random.Random) -> Any:
    """A `message_received` event as the worker builds it (contracts/build.py): the
    contract's payload for a Text message, then its stream and offset."""
    import datetime
    import uuid
    from types import SimpleNamespace

    from messenger_realtime.contracts.chat import message_received as contract
    from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
    from messenger_realtime.contracts.port import MessageView
    from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind

    row = SimpleNamespace(
        kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
        target_kind=RealtimeTargetKind.CHAT_GROUP,
        chat_id=chat_id,
        session_kind=None,
        seq=n,
    )
    view = MessageView(
        id=uuid.UUID(int=draw.getrandbits(128), version=4),
        chat_id=chat_id,
        seq=n,
        sender_user_id=uuid.UUID(int=draw.getrandbits(128), version=4),
        kind="Text",
        sent_at=datetime.datetime.now(datetime.UTC),
        body=draw.choice(BODIES),
        file_meta=None,
        card_text="",
        edited_at=None,
        deleted_at=None,
    )
    payload = contract(row, view)  # type: ignore[arg-type]
    target = HubTarget.chat(chat_id)
    payload["stream"], payload["offset"] = str(target), n
    return OutgoingEvent(target, "message_received", payload, False, None)


async def deliver(
    clients: list[ClientProcess], chats: list[Any], rate: float, duration: float, pid: int
) -> dict[str, Any]:
    """Publish `message_received` into random chats at `rate` for `duration`: lag p95,
    and Daphne's CPU and the clients' received bytes per delivery."""
    import django

    django.setup()
    from channels.layers import get_channel_layer

    from messenger_realtime.backplane.publisher import ChannelLayerPublisher

    publisher = ChannelLayerPublisher(get_channel_layer())
    sent: dict[str, tuple[float, int]] = {}  # messageId -> (publish time, members)
    draw = random.Random(49)  # the same chats and bodies, in the same order, every run
    before = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
    cpu_before = cpu_of(pid)
    loop = asyncio.get_running_loop()
    start, n = loop.time(), 0
    while (elapsed := loop.time() - start) < duration:
        due = int(elapsed * rate) + 1
        events = []
        while n < due:
            chat_id, members = draw.choice(chats)
            event = message_received(chat_id, n + 1, draw)  # offsets start at 1
            events.append(event)
            sent[event.payload["messageId"]] = (time.time(), members)
            n += 1
        if events:
            await publisher.publish_many(events)
        await asyncio.sleep(0.005)  # the open loop's tick (not synchronisation)
    # Every expected receipt in, or 10 s more.
    expected = sum(m for _, m in sent.values())
    deadline = loop.time() + 10
    while loop.time() < deadline:
        counts = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
        if sum(c["receipts"] for c in counts) >= expected:
            break
        await asyncio.sleep(0.2)  # polling the clients' counts (not synchronisation)
    cpu = cpu_of(pid) - cpu_before
    after = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
    received = sum(a["bytes_received"] for a in after) - sum(b["bytes_received"] for b in before)
    collected = await asyncio.gather(*(c.ask({"cmd": "collect"}) for c in clients))
    lags: list[float] = []
    receipts = sum(c["receipts"] for c in collected)
    for answer in collected:
        for message_id, at in answer["received"].items():
            lags.append(at - sent[message_id][0])
    return {
        "rate": rate,
        "events": n,
        "deliveries_expected": expected,
        "deliveries": receipts,
        "lag_p50_ms": round(quantile(lags, 0.5) * 1000, 1),
        "lag_p95_ms": round(quantile(lags, 0.95) * 1000, 1),
        "lag_max_ms": round(max(lags, default=0.0) * 1000, 1),
        "daphne_cpu_ms_per_delivery": round(cpu / max(receipts, 1) * 1000, 4),
        "bytes_per_delivery": round(received / max(receipts, 1), 1),
        "deflated_connections": sum(a["deflated"] for a in after),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg
    import redis

    from bench import e2e, hubclients

    database_url = os.environ.get("CONNECTIONS_DATABASE_URL") or hubclients.sibling_url(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_conns"
    )
    redis_url = os.environ.get("CONNECTIONS_REDIS_URL") or hubclients.sibling_url(
        "REDIS_URL", "redis://127.0.0.1:6379/0", "/13"
    )
    os.environ["REDIS_URL"] = redis_url  # this process's layer (--rate): Daphne's Redis
    limits = raise_file_limit(args.clients + FD_HEADROOM)
    clients_n = args.clients
    if limits["soft"] < args.clients + FD_HEADROOM:
        clients_n = limits["soft"] - FD_HEADROOM
        print(
            f"file limit {limits['soft']} (hard {limits['hard']}): one Daphne can hold "
            f"{clients_n} connections here, not {args.clients}",
            file=sys.stderr,
        )
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    admin = redis.Redis.from_url(redis_url)
    admin.flushdb()
    warm = min(20, clients_n)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(admin.flushdb)
        conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        stack.push_async_callback(conn.close)
        params = {"users": clients_n + warm, "chats": args.chats_per_user}
        for statement in SEED_SQL:
            await conn.execute(statement, params)
        users = [
            row[0]
            for row in await (
                await conn.execute("SELECT id FROM messenger_user ORDER BY username")
            ).fetchall()
        ]
        # Each chat's members that stay connected (the warm-up's users leave again).
        chat_rows = await (
            await conn.execute(
                "SELECT chat_id, count(*) FROM messenger_participant"
                " WHERE NOT user_id = ANY(%s) GROUP BY chat_id",
                [users[:warm]],
            )
        ).fetchall()
        tokens = hubclients.mint_tokens(users)
        port = hubclients.free_port()
        http = f"http://127.0.0.1:{port}"
        argv = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
        argv += [args.app]
        repo = args.repo.resolve()
        daphne_env = {**env, "PYTHONPATH": str(repo)}
        traces = Path(tempfile.mkdtemp(prefix="bench-tracemalloc-")) if args.tracemalloc else None
        if traces is not None:  # bench/tracemalloc_hook/sitecustomize.py snapshots Daphne
            daphne_env["PYTHONPATH"] = f"{ROOT / 'bench' / 'tracemalloc_hook'}:{repo}"
            daphne_env["BENCH_TRACEMALLOC"] = str(traces)
        collector = Path(tempfile.mkdtemp(prefix="bench-gc-")) if args.gc else None
        if collector is not None:  # bench/gc_hook/sitecustomize.py counts the collections
            daphne_env["PYTHONPATH"] = f"{ROOT / 'bench' / 'gc_hook'}:{daphne_env['PYTHONPATH']}"
            daphne_env["HUB_GC_STATS"] = str(collector)
        daphne = await hubclients.Service.start(
            "daphne", argv, daphne_env, "Listening on TCP address", cwd=repo
        )
        stack.push_async_callback(daphne.stop)
        pid = daphne.proc.pid
        # Warm-up: imports, first-use caches and pools, then those clients leave.
        warm_clients, warmed = await connect_all(
            http, [tokens[u] for u in users[:warm]], 1, 5, stack, args
        )
        if warmed[0]["ready"] != warm:
            raise RuntimeError(f"warm-up: {warmed}")
        for client in warm_clients:
            await client.stop()
        await asyncio.sleep(2)  # let the warm-up's closes finish (not synchronisation)
        if traces is not None:
            await snapshot(pid, traces, 0)
        rss_before, cpu_before = rss_kib(pid), cpu_of(pid)
        gc_before = await collections_so_far(collector, pid)
        clients, answers = await connect_all(
            http, [tokens[u] for u in users[warm:]], args.procs, args.concurrency, stack, args
        )
        cpu_open = cpu_of(pid) - cpu_before
        gc_open = await collections_so_far(collector, pid)
        ready = sum(a["ready"] for a in answers)
        wall = max(a["finished"] for a in answers) - min(a["started"] for a in answers)
        latencies = [x for a in answers for x in a["latencies"]]
        result: dict[str, Any] = {
            "repo": str(repo),
            "app": args.app,
            "deflate_offered": args.deflate,
            "protocol": "messagepack" if args.messagepack else "json",
            "clients": clients_n,
            "chats_per_user": args.chats_per_user,
            "file_limit": limits,
            "connected": ready,
            "errors": sorted({e for a in answers for e in a["errors"]})[:5],
            "shed_503": sum(a["shed"] for a in answers),
            "open_cpu_ms_per_connection": round(cpu_open / max(ready, 1) * 1000, 2),
            "connects_per_second": round(ready / wall, 1),
            "connect_wall_s": round(wall, 1),
            "connect_latency_p50_ms": round(quantile(latencies, 0.5) * 1000, 1),
            "connect_latency_p95_ms": round(quantile(latencies, 0.95) * 1000, 1),
        }
        if collector is not None:  # the collector's share of the open phase, by generation
            result["open_gc"] = {
                generation: {
                    "collections": gc_open[generation][0] - gc_before[generation][0],
                    "cpu_ms_per_connection": round(
                        (gc_open[generation][1] - gc_before[generation][1]) / max(ready, 1) * 1000,
                        3,
                    ),
                }
                for generation in gc_open
            }
        await asyncio.sleep(5)  # past the connect phase's tail (not synchronisation)
        cpu_idle_start = cpu_of(pid)
        idle_start = time.monotonic()
        await asyncio.sleep(args.idle)  # the measured idle window
        cpu_idle = cpu_of(pid) - cpu_idle_start
        idle_s = time.monotonic() - idle_start
        rss_after = rss_kib(pid)
        if traces is not None:
            await snapshot(pid, traces, 1)
            result_memory = memory_by_site(traces, ready, args.top)
        statuses = await asyncio.gather(*(c.ask({"cmd": "status"}) for c in clients))
        result.update(
            {
                "idle_window_s": round(idle_s, 1),
                "idle_cpu_ms_per_connection_per_s": round(
                    cpu_idle / max(ready, 1) / idle_s * 1000, 4
                ),
                "idle_cpu_share_of_a_core": round(cpu_idle / idle_s, 3),
                "rss_kib_before": rss_before,
                "rss_kib_after": rss_after,
                "rss_kib_per_connection": round((rss_after - rss_before) / max(ready, 1), 1),
                "closed_while_idle": sum(s["closed"] for s in statuses),
            }
        )
        if traces is not None:
            result["memory_per_connection_by_site"] = result_memory
        if args.rate:
            by_chat = [(c, int(m)) for c, m in chat_rows]
            result["deliver"] = await deliver(clients, by_chat, args.rate, args.deliver, pid)
            result["deliver"]["daphne_rss_kib"] = rss_kib(pid)
    result["host_load"] = os.getloadavg()[0]
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


async def collections_so_far(folder: Path | None, pid: int) -> dict[str, list[float]]:
    """Daphne's collections and their CPU seconds so far, by generation, as its gc hook
    wrote them last; read after the hook's next write (it writes every 2 s)."""
    if folder is None:
        return {}
    path = folder / f"gc-{pid}.json"
    seen = path.stat().st_mtime_ns if path.exists() else 0
    for _ in range(100):
        if path.exists() and path.stat().st_mtime_ns != seen:
            return dict(json.loads(path.read_text())["collections"])
        await asyncio.sleep(0.05)
    raise RuntimeError("Daphne's gc hook wrote nothing (bench/gc_hook)")


def main() -> None:
    if "--client" in sys.argv:
        asyncio.run(client_main())
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--chats-per-user", type=int, default=5)
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--concurrency", type=int, default=50, help="connects in flight each")
    parser.add_argument("--idle", type=float, default=60.0, help="s of idle measured")
    parser.add_argument("--rate", type=float, default=0.0, help="events/s while held")
    parser.add_argument("--deliver", type=float, default=30.0, help="s of --rate traffic")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout Daphne serves")
    parser.add_argument(
        "--app",
        default="project.asgi:application",
        help="the ASGI application Daphne serves (bench.floor_app:application: the floor)",
    )
    parser.add_argument(
        "--deflate", action="store_true", help="the clients offer permessage-deflate"
    )
    parser.add_argument(
        "--messagepack", action="store_true", help="the MessagePack hub protocol, not JSON"
    )
    parser.add_argument("--quick", action="store_true", help="a small run (the CI smoke)")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="Daphne's memory per connection by site"
    )
    parser.add_argument(
        "--gc", action="store_true", help="the collector's CPU in the open phase (bench/gc_hook)"
    )
    parser.add_argument("--top", type=int, default=25, help="sites listed with --tracemalloc")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.procs, args.idle = 40, 2, 3.0
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
