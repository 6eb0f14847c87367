"""What one abusive but authenticated user can cost a hub process (issues 44 and 56),
through a real Daphne and a real worker: a bystander's REST latency (GET /api/chats) and
connect time (negotiate, upgrade, handshake) before and while one user abuses each path,
with what the abuser got and what Daphne spent (CPU seconds, peak RSS growth, open file
descriptors).

    .venv/bin/python bench/one_user.py [--seconds 8] [--repeat 3] [--only NAME,NAME] [--quick]

Paths: open connections until refused; connections opened on tokens whose places
lapsed; Recover the last 25 large messages of a chat (as much as one call may send) over
8 connections as fast as answers come; WebSockets that skip negotiate and never send
their handshake; negotiates in a loop; and every hub method, Pings, and an unknown
method at line rate over 32 connections (the user's cap), each connection writing as
fast as TCP lets it and reconnecting when closed; the same over long polling and
Server-Sent Events (their POSTs). Typing goes to a chat of 200 members, 50 of them
connected. Own database (messenger_bench_one_user) and Redis db 9. Prints JSON and a
markdown table (docs/reliability.md, "What one user can cost a process").
"""

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import isolation  # noqa: E402
from bench.hubclients import proc_stat, sibling_url  # noqa: E402

DATABASE_URL = sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_one_user"
)
REDIS_URL = sibling_url("REDIS_URL", "redis://127.0.0.1:6379/0", "/9")
RS = "\x1e"
BODY = "x" * 9_000  # a large message: what makes a recovery heavy
MESSAGES = 300
CROWD = 200  # members of the crowd chat besides the abuser and the bystander
LISTENERS = 50  # of them connected, receiving whatever the abuser's typing sends
FLOODERS = 32  # the abuser's connections for a method at line rate (the default cap)
ABUSERS = 64  # users made to abuse, one per phase (17 paths, up to 3 runs each)
ABUSER = object()  # in a method's arguments: the abusing user's own token
FRAME = 16 * 1024  # bytes of records per frame the flooders write


def prepare(redis_url: str = REDIS_URL) -> dict[str, uuid.UUID]:
    """The benchmark's database with an abuser and a bystander sharing a chat of large
    messages, through the project's own migrations and SQL (isolation.py's stack, which
    then serves it on `redis_url`)."""
    isolation.DATABASE_URL, isolation.REDIS_URL = DATABASE_URL, redis_url
    admin = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS messenger_bench_one_user WITH (FORCE)")
        conn.execute("CREATE DATABASE messenger_bench_one_user")
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL)
    import subprocess

    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    ids: dict[str, Any] = {n: uuid.uuid4() for n in ("bystander", "chat", "crowd")}
    ids["members"] = [uuid.uuid4() for _ in range(CROWD)]
    # One abuser per phase: each starts from a clean slate, in Redis (forget_counts) and
    # in the hub's memory (a refused user's connects are refused from a memo until the
    # rate limit's wait is over: hub/admission.py).
    ids["abusers"] = [uuid.uuid4() for _ in range(ABUSERS)]
    users = [("bystander", ids["bystander"])]
    users += [(f"abuser{n}", abuser) for n, abuser in enumerate(ids["abusers"])]
    users += [(f"member{n}", member) for n, member in enumerate(ids["members"])]
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        for name, user in users:
            conn.execute(
                "INSERT INTO messenger_user (id, password, is_superuser, username, first_name,"
                " last_name, email, is_staff, is_active, date_joined, display_name)"
                " VALUES (%s, '!', false, %s, '', '', '', false, true, now(), '')",
                (user, name),
            )
        members = {
            "chat": [*ids["abusers"], ids["bystander"]],
            "crowd": [*ids["abusers"], ids["bystander"], *ids["members"]],
        }
        for chat, who in members.items():
            conn.execute(
                "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
                " VALUES (%s, 'Group', %s, 0, now(), now())",
                (ids[chat], chat),
            )
            for user in who:
                conn.execute(
                    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active,"
                    " took_part, last_read_seq, joined_at) VALUES (gen_random_uuid(), %s, %s,"
                    " true, true, 0, now())",  # members who talked: their presence shows
                    (ids[chat], user),
                )
    return ids


def post_messages(chat: uuid.UUID, sender: uuid.UUID) -> None:
    """MESSAGES large messages, with their stream offsets, through the REST API's own
    service (so the streams are what a client recovers)."""
    os.environ.update(
        DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, DJANGO_SETTINGS_MODULE="project.settings"
    )
    import django

    django.setup()
    from project.messenger import services

    for n in range(MESSAGES):
        services.post_message(sender, chat, f"{n:04d}{BODY}")


def pctl(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 1)


class Daphne:
    """What the hub process spent: CPU seconds, RSS and open descriptors, read from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def sample(self) -> dict[str, float]:
        stat = proc_stat(self.pid) or []
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(stat[11]) + int(stat[12])) / ticks if len(stat) > 12 else float("nan")
        rss = int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * os.sysconf(
            "SC_PAGE_SIZE"
        )
        fds = len(os.listdir(f"/proc/{self.pid}/fd"))
        return {"cpu_s": cpu, "rss_mb": rss / 1e6, "fds": fds}


async def peak_rss(daphne: Daphne, stop: asyncio.Event) -> float:
    """The highest RSS (MB) seen until `stop`, sampled every 0.1 s."""
    peak = 0.0
    while not stop.is_set():
        peak = max(peak, daphne.sample()["rss_mb"])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    return peak


async def negotiate(base: str, token: str) -> tuple[int, dict[str, Any]]:
    def call() -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"{base}/hubs/messenger/negotiate?negotiateVersion=1", data=b"", method="POST"
        )
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, {}
        except OSError:
            return 0, {}

    return await asyncio.to_thread(call)


async def open_connection(base: str, ws_base: str, token: str) -> Any:
    """negotiate, upgrade, handshake: an open connection, or None when refused."""
    status, granted = await negotiate(base, token)
    if status != 200:
        return None
    url = f"{ws_base}/hubs/messenger?id={granted['connectionToken']}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        ws = await websockets.connect(url, additional_headers=headers, max_size=None)
    except (OSError, websockets.InvalidStatus):
        return None
    await ws.send(json.dumps({"protocol": "json", "version": 1}) + RS)
    await ws.recv()
    return ws


async def bystander(base: str, ws_base: str, token: str, stop: asyncio.Event) -> dict[str, Any]:
    """The bystander's REST and connect latencies until `stop`."""
    rest: list[float] = []
    connects: list[float] = []
    failed = 0

    def get() -> bool:
        request = urllib.request.Request(f"{base}/api/chats")
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
                return True
        except OSError:
            return False

    next_connect = 0.0
    while not stop.is_set():
        started = time.monotonic()
        if not await asyncio.to_thread(get):
            failed += 1
        rest.append(time.monotonic() - started)
        if started >= next_connect:  # a connect a second: well inside its own rate limit
            next_connect = started + 1.0
            started = time.monotonic()
            ws = await open_connection(base, ws_base, token)
            if ws is None:
                failed += 1
            else:
                connects.append(time.monotonic() - started)
                await ws.close()
        await asyncio.sleep(0.05)
    return {
        "rest_p50_ms": pctl(rest, 50),
        "rest_p95_ms": pctl(rest, 95),
        "connect_p95_ms": pctl(connects, 95),
        "bystander_failures": failed,
    }


async def abuse_connections(base: str, ws_base: str, token: str, stop: asyncio.Event) -> Any:
    opened, refused = [], 0
    while not stop.is_set():
        ws = await open_connection(base, ws_base, token)
        if ws is None:
            refused += 1
            await asyncio.sleep(0.01)
        else:
            opened.append(ws)
    for ws in opened:
        with contextlib.suppress(Exception):
            await ws.close()
    return {"open_connections": len(opened), "refused": refused}


async def abuse_recover(
    base: str, ws_base: str, token: str, stream: str, stop: asyncio.Event
) -> Any:
    totals = {"recovers": 0, "bytes": 0, "recovered": 0, "resync": 0, "refused": 0}

    async def one(ws: Any) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            call = {"type": 1, "invocationId": str(n), "target": "Recover", "arguments": []}
            # 25 large events missed: the most that fits in RECOVERY_MAX_BYTES (256 KiB);
            # further behind, a call answers "resync" and costs next to nothing.
            call["arguments"] = [{stream: MESSAGES - 25}]
            await ws.send(json.dumps(call) + RS)
            while True:
                frame = await ws.recv()
                totals["bytes"] += len(frame)
                records = [json.loads(r) for r in str(frame).split(RS) if r]
                done = [r for r in records if r.get("type") == 3]
                if done:
                    totals["recovers"] += 1
                    result = done[0].get("result") or {}
                    if "error" in done[0]:
                        totals["refused"] += 1
                    for outcome in result.values():
                        totals[outcome] = totals.get(outcome, 0) + 1
                    break

    sockets = [await open_connection(base, ws_base, token) for _ in range(8)]
    live = [ws for ws in sockets if ws is not None]
    with contextlib.suppress(Exception):
        await asyncio.gather(*(one(ws) for ws in live))
    for ws in live:
        with contextlib.suppress(Exception):
            await ws.close()
    return totals


async def abuse_no_handshake(ws_base: str, token: str, stop: asyncio.Event) -> Any:
    held, refused = [], 0
    while not stop.is_set():
        try:
            url = f"{ws_base}/hubs/messenger"
            headers = {"Authorization": f"Bearer {token}"}
            held.append(await websockets.connect(url, additional_headers=headers))
        except (OSError, websockets.InvalidStatus, websockets.InvalidMessage):
            refused += 1
            await asyncio.sleep(0.01)
    for ws in held:
        with contextlib.suppress(Exception):
            await ws.close()
    return {"held_without_handshake": len(held), "refused": refused}


async def abuse_negotiates(base: str, token: str, stop: asyncio.Event) -> Any:
    counts: dict[int, int] = {}
    while not stop.is_set():
        status, _ = await negotiate(base, token)
        counts[status] = counts.get(status, 0) + 1
    return {"negotiates": {str(k): v for k, v in sorted(counts.items())}}


def records_of(target: str | None, arguments: list[Any]) -> str:
    """As many fire-and-forget records of `target` (None: Pings) as fit in FRAME bytes."""
    if target is None:
        record = '{"type":6}' + RS
    else:
        record = json.dumps({"type": 1, "target": target, "arguments": arguments}) + RS
    return record * max(1, FRAME // len(record))


async def abuse_method(
    base: str, ws_base: str, token: str, frame: str, stop: asyncio.Event
) -> dict[str, Any]:
    """FLOODERS connections, each writing `frame` as fast as TCP lets it (websockets waits
    while its buffer is full) and reading what comes back; a closed one reconnects.
    `written` counts records handed to the client library, which keeps taking them for a
    moment after the server stopped reading (a dropped socket discards them): what the
    hub read is far less (its budget closes a connection within ~120 records)."""
    totals = {"written": 0, "closed": 0, "connects_refused": 0, "errors": 0}
    per_frame = frame.count(RS)

    async def flooder() -> None:
        while not stop.is_set():
            ws = await open_connection(base, ws_base, token)
            if ws is None:
                totals["connects_refused"] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1)
                continue

            async def drain(ws: Any = ws) -> None:
                with contextlib.suppress(Exception):
                    async for answer in ws:
                        totals["errors"] += str(answer).count('"error"')

            reader = asyncio.create_task(drain())
            try:
                while not stop.is_set():
                    await ws.send(frame)
                    totals["written"] += per_frame
                    # A send that finds room returns without suspending: yield, or this
                    # loop would starve the bystander's own tasks in this process.
                    await asyncio.sleep(0)
            except websockets.ConnectionClosed:
                totals["closed"] += 1
            finally:
                reader.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 1)

    await asyncio.gather(*(flooder() for _ in range(FLOODERS)))
    return totals


async def abuse_http_sends(
    base: str, token: str, transport: str, frame: str, stop: asyncio.Event
) -> dict[str, Any]:
    """Eight long-polling or Server-Sent Events connections, each POSTing `frame` bodies
    four at a time as fast as answers come (the official clients send one at a time),
    and connecting again once its connection is gone."""
    totals: dict[str, int] = {}

    def post(connection_token: str) -> int:
        request = urllib.request.Request(
            f"{base}/hubs/messenger?id={connection_token}", data=frame.encode(), method="POST"
        )
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0

    def open_http(connection_token: str) -> Any:
        """The first GET (a poll, or the event stream held open) and the handshake."""
        url = f"{base}/hubs/messenger?id={connection_token}"
        request = urllib.request.Request(url)
        request.add_header("Authorization", f"Bearer {token}")
        if transport == "ServerSentEvents":
            request.add_header("Accept", "text/event-stream")
        response = urllib.request.urlopen(request, timeout=10)
        if transport == "LongPolling":
            response.read()
            response = None
        handshake = urllib.request.Request(
            url, data=('{"protocol":"json","version":1}' + RS).encode(), method="POST"
        )
        handshake.add_header("Authorization", f"Bearer {token}")
        urllib.request.urlopen(handshake, timeout=10).read()
        return response

    async def sender() -> None:
        """Connect, POST until the connection is gone (404), connect again."""
        while not stop.is_set():
            status, granted = await negotiate(base, token)
            if status != 200:
                totals[f"negotiate {status}"] = totals.get(f"negotiate {status}", 0) + 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.05)
                continue
            try:
                held = await asyncio.to_thread(open_http, granted["connectionToken"])
            except OSError:
                totals["open failed"] = totals.get("open failed", 0) + 1
                continue
            try:
                gone = False
                while not stop.is_set() and not gone:
                    answers = await asyncio.gather(
                        *(asyncio.to_thread(post, granted["connectionToken"]) for _ in range(4))
                    )
                    for answer in answers:
                        totals[str(answer)] = totals.get(str(answer), 0) + 1
                    gone = 404 in answers
            finally:
                if held is not None:
                    held.close()

    await asyncio.gather(*(sender() for _ in range(8)))
    return {"posts": dict(sorted(totals.items())), "records_per_post": frame.count(RS)}


async def abuse_lapsed_places(base: str, ws_base: str, user: uuid.UUID, stop: Any) -> Any:
    """Transports opened on connection tokens whose places lapsed: what negotiate granted
    15 s ago (a token lives 300 s, a place 20 s), signed as negotiate signs it."""
    from django.core import signing

    from messenger_realtime.hub.credentials.tokens import _CONNECTION_SALT

    token = STACK.token(user)
    opened, refused = [], 0
    while not stop.is_set():
        made_ms = int((time.time() - 15) * 1000)
        low = int.from_bytes(os.urandom(10), "big")
        value = (made_ms << 80) | (0x7 << 76) | ((low >> 64) & 0xFFF) << 64 | (0b10 << 62)
        value |= low & ((1 << 62) - 1)
        data = {"c": uuid.UUID(int=value).hex, "u": str(user)}
        grant = signing.dumps(data, salt=_CONNECTION_SALT)
        try:
            ws = await websockets.connect(
                f"{ws_base}/hubs/messenger?id={grant}",
                additional_headers={"Authorization": f"Bearer {token}"},
            )
            await ws.send(json.dumps({"protocol": "json", "version": 1}) + RS)
            await ws.recv()
            opened.append(ws)
        except (OSError, websockets.InvalidStatus, websockets.ConnectionClosed):
            refused += 1
            await asyncio.sleep(0.01)
    for ws in opened:
        with contextlib.suppress(Exception):
            await ws.close()
    return {"open_connections": len(opened), "refused": refused}


async def listeners(ws_base: str, members: list[uuid.UUID], stop: asyncio.Event) -> None:
    """LISTENERS members of the crowd chat connected, reading everything sent to them."""

    async def listen(member: uuid.UUID) -> None:
        url = f"{ws_base}/hubs/messenger?access_token={STACK.token(member)}"
        with contextlib.suppress(Exception):
            async with websockets.connect(url, max_size=None) as ws:
                await ws.send(json.dumps({"protocol": "json", "version": 1}) + RS)
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ws.recv(), 1)

    await asyncio.gather(*(listen(m) for m in members[:LISTENERS]))


def bystander_for(base: str, ws_base: str, token: str, seconds: float) -> dict[str, Any]:
    """The bystander, in a process of its own for `seconds`: the abuser's clients, busy
    in this process, must not delay its requests or its clock."""

    async def measure() -> dict[str, Any]:
        stop = asyncio.Event()
        task = asyncio.create_task(bystander(base, ws_base, token, stop))
        await asyncio.sleep(seconds)
        stop.set()
        return await task

    return asyncio.run(measure())


BYSTANDERS = concurrent.futures.ProcessPoolExecutor(
    max_workers=1, mp_context=multiprocessing.get_context("spawn")
)


async def phase(
    name: str, seconds: float, daphne: Daphne, probe: Any, abuse: Any | None
) -> dict[str, Any]:
    stop = asyncio.Event()
    before = daphne.sample()
    peak = asyncio.create_task(peak_rss(daphne, stop))
    loop = asyncio.get_running_loop()
    tasks = [loop.run_in_executor(BYSTANDERS, bystander_for, *probe, seconds)]
    if abuse is not None:
        tasks.append(asyncio.create_task(abuse(stop)))
    await asyncio.sleep(seconds)
    after = daphne.sample()
    stop.set()
    results = await asyncio.gather(*tasks)
    figures: dict[str, Any] = {"path": name, **results[0]}
    if abuse is not None:
        figures["abuser"] = results[1]
    figures["daphne_cpu_s"] = round(after["cpu_s"] - before["cpu_s"], 2)
    figures["daphne_rss_mb"] = round(after["rss_mb"], 1)
    figures["daphne_rss_growth_mb"] = round(max(await peak, after["rss_mb"]) - before["rss_mb"], 1)
    figures["daphne_fds"] = after["fds"]
    return figures


async def run(
    stack: Any, ids: dict[str, Any], seconds: float, only: set[str] | None, repeat: int = 1
) -> list[dict[str, Any]]:
    base, ws_base = f"http://127.0.0.1:{stack.port}", f"ws://127.0.0.1:{stack.port}"
    other = stack.token(ids["bystander"])
    abusers = iter(ids["abusers"])
    daphne = Daphne(stack.procs[0].pid)
    stream = f"chat:{ids['chat']}"
    deadline = time.monotonic() + 30
    while (await negotiate(base, other))[0] != 200:  # Daphne may still be starting
        if time.monotonic() > deadline:
            raise RuntimeError("Daphne did not answer within 30 s")
        await asyncio.sleep(0.2)

    probe = (base, ws_base, other)  # bystander_for's, in its own process

    def method(target: str | None, arguments: list[Any]) -> Any:
        def abuse(stop: Any, abuser: str, user: uuid.UUID) -> Any:
            frame = records_of(target, [abuser if a is ABUSER else a for a in arguments])
            return abuse_method(base, ws_base, abuser, frame, stop)

        return abuse

    def sends(transport: str) -> Any:
        frame = records_of("GetGroups", [])
        return lambda stop, abuser, user: abuse_http_sends(base, abuser, transport, frame, stop)

    acknowledged = {f"chat:{uuid.uuid4()}": n for n in range(256)}
    watched = [str(member) for member in ids["members"]]
    paths = [
        ("none (baseline)", None),
        ("open connections", lambda stop, t, u: abuse_connections(base, ws_base, t, stop)),
        ("lapsed places", lambda stop, t, u: abuse_lapsed_places(base, ws_base, u, stop)),
        ("Recover", lambda stop, t, u: abuse_recover(base, ws_base, t, stream, stop)),
        ("WebSockets without handshake", lambda stop, t, u: abuse_no_handshake(ws_base, t, stop)),
        ("negotiate loop", lambda stop, t, u: abuse_negotiates(base, t, stop)),
        ("GetGroups", method("GetGroups", [])),
        ("Typing", method("Typing", [str(ids["crowd"])])),
        ("Acknowledge", method("Acknowledge", [acknowledged, 1000])),
        ("WatchPresence", method("WatchPresence", [watched])),
        ("RenewToken", method("RenewToken", [ABUSER])),
        ("Recover (line rate)", method("Recover", [{stream: MESSAGES}])),
        ("unknown method", method("NoSuchMethod", [])),
        ("Pings", method(None, [])),
        ("LongPolling sends", sends("LongPolling")),
        ("ServerSentEvents sends", sends("ServerSentEvents")),
    ]
    figures = []
    listening = asyncio.Event()
    crowd = asyncio.create_task(listeners(ws_base, ids["members"], listening))
    try:
        for name, abuse in paths:
            if only and name not in only and abuse is not None:
                continue
            runs = []
            for _ in range(repeat):
                await forget_counts()  # each from a clean slate: no rate limit or place left
                user = next(abusers)  # and a user the hub has not refused yet
                runs.append(await phase(name, seconds, daphne, probe, _as(abuse, stack, user)))
                await asyncio.sleep(1)
            figures.append(median_run(runs))
    finally:
        listening.set()
        await crowd
    return figures


def _as(abuse: Any, stack: Any, user: uuid.UUID) -> Any:
    """A path's abuse as `user` (None for the baseline): what phase() runs."""
    if abuse is None:
        return None
    token = stack.token(user)
    return lambda stop: abuse(stop, token, user)


async def forget_counts() -> None:
    """The rate limits' logs and the connection places of the earlier paths."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(REDIS_URL)
    async with client:
        for pattern in ("messenger_realtime:rate:*", "messenger_realtime:connections:*"):
            async for key in client.scan_iter(match=pattern):
                await client.delete(key)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose bystander REST p95 is the median of `runs`, with every run's p95."""
    ordered = sorted(runs, key=lambda run: run["rest_p95_ms"])
    median = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        median["rest_p95_runs_ms"] = [run["rest_p95_ms"] for run in runs]
    return median


# What each hub method costs and what bounds it (hub/connection/methods/, issue 56).
DECLARED = {
    "GetGroups": "1 unit",
    "Typing": "1 unit",
    "Acknowledge": "1 unit + 1 per 64 streams",
    "WatchPresence": "1 unit + 1 per 10 users; shared",
    "RenewToken": "5 units; shared",
    "Recover": "3 units + 1 per 25 streams; then 1 per 10 events and per 16 KiB sent; shared",
    "Recover (line rate)": "as Recover",
    "unknown method": "1 unit",
    "Pings": "1 unit",
    "LongPolling sends": "each record as its method; 2 POSTs in hand",
    "ServerSentEvents sends": "each record as its method; 2 POSTs in hand",
}


def table(figures: list[dict[str, Any]]) -> str:
    lines = [
        "| abuse | declared cost | bystander REST p50 / p95 | bystander connect p95 | "
        "abuser got | Daphne CPU | RSS (peak growth) | fds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in figures:
        got = json.dumps(f.get("abuser", "")).replace("|", "/") if "abuser" in f else "-"
        p95 = f"{f['rest_p95_ms']} ms"
        if "rest_p95_runs_ms" in f:
            p95 += f" ({', '.join(str(v) for v in f['rest_p95_runs_ms'])})"
        lines.append(
            f"| {f['path']} | {DECLARED.get(f['path'], '-')} | {f['rest_p50_ms']} / {p95} | "
            f"{f['connect_p95_ms']} ms | {got} | {f['daphne_cpu_s']} s |"
            f" {f['daphne_rss_mb']} MB (+{f['daphne_rss_growth_mb']}) | {f['daphne_fds']} |"
        )
    return "\n".join(lines)


STACK: Any = None  # the running stack (abuse_lapsed_places and the listeners sign with it)


def main() -> None:
    global STACK
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per path")
    parser.add_argument("--only", default="", help="comma-separated paths (and the baseline)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per path; the table shows the median's"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke: 1 s each, two paths, few messages"
    )
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()} or None
    if args.quick:
        global MESSAGES
        MESSAGES, args.seconds = 30, 1.0
        only = only or {"Typing", "LongPolling sends"}
    ids = prepare()
    post_messages(ids["chat"], ids["bystander"])
    stack = STACK = isolation.Stack(ROOT)
    try:
        figures = asyncio.run(run(stack, ids, args.seconds, only, args.repeat))
    finally:
        stack.close()
    print(json.dumps(figures, indent=1))
    print(table(figures))


if __name__ == "__main__":
    main()
