"""What one abusive but authenticated user can cost a hub process (issue 44), through a
real Daphne and a real worker: a bystander's REST latency (GET /api/chats) and connect
time (negotiate, upgrade, handshake) before and while one user abuses each path, with
what the abuser got and what Daphne spent (CPU seconds, RSS, open file descriptors).

    .venv/bin/python bench/one_user.py [--seconds 8]

Paths: open connections until refused; Recover the last 25 large messages of a chat (as
much as one call may send) over 8 connections as fast as answers come; WebSockets that
skip negotiate and never send their handshake; negotiates in a loop. Own database
(messenger_bench_one_user) and Redis db 9. Prints JSON and a markdown table
(docs/reliability.md, "What one user can cost a process").
"""

import argparse
import asyncio
import contextlib
import json
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
    ids = {"abuser": uuid.uuid4(), "bystander": uuid.uuid4(), "chat": uuid.uuid4()}
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        for name in ("abuser", "bystander"):
            conn.execute(
                "INSERT INTO messenger_user (id, password, is_superuser, username, first_name,"
                " last_name, email, is_staff, is_active, date_joined, display_name)"
                " VALUES (%s, '!', false, %s, '', '', '', false, true, now(), '')",
                (ids[name], name),
            )
        conn.execute(
            "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
            " VALUES (%s, 'Group', 'big', 0, now(), now())",
            (ids["chat"],),
        )
        for name in ("abuser", "bystander"):
            conn.execute(
                "INSERT INTO messenger_participant (id, chat_id, user_id, is_active,"
                " last_read_seq, joined_at) VALUES (gen_random_uuid(), %s, %s, true, 0, now())",
                (ids["chat"], ids[name]),
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


async def phase(
    name: str, seconds: float, daphne: Daphne, probe: Any, abuse: Any | None
) -> dict[str, Any]:
    stop = asyncio.Event()
    before = daphne.sample()
    tasks = [asyncio.create_task(probe(stop))]
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
    figures["daphne_fds"] = after["fds"]
    return figures


async def run(stack: Any, ids: dict[str, uuid.UUID], seconds: float) -> list[dict[str, Any]]:
    base, ws_base = f"http://127.0.0.1:{stack.port}", f"ws://127.0.0.1:{stack.port}"
    abuser, other = stack.token(ids["abuser"]), stack.token(ids["bystander"])
    daphne = Daphne(stack.procs[0].pid)
    stream = f"chat:{ids['chat']}"
    deadline = time.monotonic() + 30
    while (await negotiate(base, other))[0] != 200:  # Daphne may still be starting
        if time.monotonic() > deadline:
            raise RuntimeError("Daphne did not answer within 30 s")
        await asyncio.sleep(0.2)

    def probe(stop: asyncio.Event) -> Any:
        return bystander(base, ws_base, other, stop)

    paths = [
        ("none (baseline)", None),
        ("open connections", lambda stop: abuse_connections(base, ws_base, abuser, stop)),
        ("Recover", lambda stop: abuse_recover(base, ws_base, abuser, stream, stop)),
        ("WebSockets without handshake", lambda stop: abuse_no_handshake(ws_base, abuser, stop)),
        ("negotiate loop", lambda stop: abuse_negotiates(base, abuser, stop)),
    ]
    figures = []
    for name, abuse in paths:
        await forget_counts()  # each path from a clean slate: no rate limit or place left over
        figures.append(await phase(name, seconds, daphne, probe, abuse))
        await asyncio.sleep(1)
    return figures


async def forget_counts() -> None:
    """The rate limits' logs and the connection places of the earlier paths."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(REDIS_URL)
    async with client:
        for pattern in ("messenger_realtime:rate:*", "messenger_realtime:connections:*"):
            async for key in client.scan_iter(match=pattern):
                await client.delete(key)


def table(figures: list[dict[str, Any]]) -> str:
    lines = [
        "| abuse | bystander REST p50 / p95 | bystander connect p95 | abuser got | "
        "Daphne CPU | RSS | fds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in figures:
        got = json.dumps(f.get("abuser", "")).replace("|", "/") if "abuser" in f else "-"
        lines.append(
            f"| {f['path']} | {f['rest_p50_ms']} / {f['rest_p95_ms']} ms | "
            f"{f['connect_p95_ms']} ms | {got} | {f['daphne_cpu_s']} s | "
            f"{f['daphne_rss_mb']} MB | {f['daphne_fds']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per path")
    args = parser.parse_args()
    ids = prepare()
    post_messages(ids["chat"], ids["bystander"])
    stack = isolation.Stack(ROOT)
    try:
        figures = asyncio.run(run(stack, ids, args.seconds))
    finally:
        stack.close()
    print(json.dumps(figures, indent=1))
    print(table(figures))


if __name__ == "__main__":
    main()
