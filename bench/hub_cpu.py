"""The hub alone: Daphne's CPU per delivery, fed straight through the channel layer.

    .venv/bin/python bench/hub_cpu.py [--scenario pairs|group] [--rate R] [--duration S]
                                      [--repo PATH]

No worker and no PostgreSQL writes in the measured window: this process publishes
`message_received` events through the project's pipelined push (ChannelLayerPublisher) at
an open-loop rate, raw SignalR JSON clients (bench/hubclients.py, processes of their own)
receive them through a real Daphne, and Daphne's CPU time (from /proc) is divided by the
deliveries. Scenarios: `pairs` = 500 clients in 250 two-member chats (a delivery is one
event to one of two members); `group` = 1,000 clients in one chat (every event is 1,000
deliveries). `--repo` serves Daphne from another checkout (an older commit, for "before").
Prints JSON: deliveries, lost, lag p50/p95 (publish -> receipt) and CPU ms per delivery
for Daphne, the clients and Redis (the load generator's counted apart).
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import psycopg  # noqa: E402
import redis  # noqa: E402

from bench import e2e, hubclients  # noqa: E402

DATABASE_URL = os.environ.get("HUB_CPU_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_hub"
)
REDIS_URL = os.environ.get("HUB_CPU_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/11"
)
os.environ["REDIS_URL"] = REDIS_URL  # this process's layer: the same Redis as Daphne's
SCENARIOS = {"pairs": (250, 2, 2), "group": (1, 1000, 2)}  # chats, members, client procs
QUICK = {"pairs": (10, 2, 2), "group": (1, 20, 2)}  # --quick: the CI smoke
TICK = 0.005  # s between publishes (events due in a tick go out as one chunk)


def events_for(chat: e2e.Chat, count: int, start: int) -> list[Any]:
    from messenger_realtime.contracts.events import HubTarget, OutgoingEvent

    return [
        OutgoingEvent(
            HubTarget.chat(chat.id),
            "message_received",
            {
                "chatId": str(chat.id),
                "messageId": f"m{start + i}",
                "seq": start + i,
                "senderId": str(chat.members[0]),
                "kind": "Text",
                "body": "hello, this is a message of ordinary length for a chat",
                "sentAt": "2026-12-01T00:00:00.000000Z",
            },
        )
        for i in range(count)
    ]


async def publish(chats: list[e2e.Chat], rate: float, duration: float) -> dict[str, float]:
    """Open loop at `rate` events/s, round robin over the chats; message id -> sent at."""
    import django

    django.setup()
    from channels.layers import get_channel_layer

    from messenger_realtime.backplane.publisher import ChannelLayerPublisher

    publisher = ChannelLayerPublisher(get_channel_layer())
    sent: dict[str, float] = {}
    start, n = time.time(), 0
    while (now := time.time()) < start + duration:
        due = int((now - start) * rate) - n
        chunk = [e for k in range(due) for e in events_for(chats[(n + k) % len(chats)], 1, n + k)]
        if chunk:
            await publisher.publish_many(chunk)
            at = time.time()
            sent.update({e.payload["messageId"]: at for e in chunk})
            n += len(chunk)
        await asyncio.sleep(TICK)  # pacing of the open loop, not synchronisation
    return sent


async def run(
    scenario: str, rate: float, duration: float, repo: Path, quick: bool = False
) -> dict[str, Any]:
    chats, members, procs = (QUICK if quick else SCENARIOS)[scenario]
    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    admin = redis.Redis.from_url(REDIS_URL)
    admin.flushdb()
    redis_pid = int(admin.info("server")["process_id"])  # type: ignore[index]
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(admin.flushdb)
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        chat_list = await e2e.seed(conn, chats, members, procs)
        if scenario == "group":  # one chat, its members spread over the client processes
            users = chat_list[0].members
            groups = [users[i::procs] for i in range(procs)]
        else:
            groups = [
                [u for c in chat_list if c.process == i for u in c.members] for i in range(procs)
            ]
        tokens = hubclients.mint_tokens([u for chat in chat_list for u in chat.members])
        port = hubclients.free_port()
        argv = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
        argv += ["project.asgi:application"]
        daphne = await hubclients.Service.start(
            "daphne", argv, {**env, "PYTHONPATH": str(repo)}, "Listening on TCP address", cwd=repo
        )
        stack.push_async_callback(daphne.stop)
        clients = []
        for mine in groups:
            clients.append(
                await hubclients.HubClients.start(
                    f"http://127.0.0.1:{port}", [tokens[u] for u in mine]
                )
            )
            stack.push_async_callback(clients[-1].stop)
        pids = {
            "daphne": [daphne.proc.pid],
            "clients": [c.proc.pid for c in clients],
            "redis": [redis_pid],
            "publisher": [os.getpid()],
        }
        await publish(chat_list, min(rate, 50), 1.0)  # warm-up
        for c in clients:
            await c.ask({"cmd": "until", "unique": 10**9, "idle": 1.0, "limit": 10})
            await c.ask({"cmd": "collect"})
        before, began = hubclients.cpu_sample(pids), time.time()
        sent = await publish(chat_list, rate, duration)
        expected = len(sent) * members
        per_process = [expected * len(g) // (chats * members) for g in groups]
        for c, n in zip(clients, per_process, strict=True):
            await c.ask({"cmd": "until", "unique": n, "idle": 5.0, "limit": 120})
        after, ended = hubclients.cpu_sample(pids), time.time()
        answers = [await process.ask({"cmd": "collect"}) for process in clients]
        receipts = [(m, (i, c), t) for i, a in enumerate(answers) for m, c, t in a["receipts"]]
        closed = sum(a["closed"] for a in answers)
    lags = sorted((t - sent[m]) * 1000 for m, _, t in receipts if m in sent)
    seen = {(m, c) for m, c, _ in receipts if m in sent}  # c: (process, client)
    delivered = len(lags)
    used = {
        name: sum(v - before[name].get(k, 0.0) for k, v in values.items())
        for name, values in after.items()
    }
    last = max((t for m, _, t in receipts if m in sent), default=ended)
    return {
        "scenario": scenario,
        "repo": str(repo),
        "events": len(sent),
        "offered_deliveries_per_s": rate * members,
        "deliveries": delivered,
        "lost": expected - len(seen),
        "clients_closed": closed,  # connections the hub dropped during the run
        "deliveries_per_s": round(delivered / max(last - began, 1e-9)),
        "lag_p50_ms": round(lags[len(lags) // 2], 1) if lags else None,
        "lag_p95_ms": round(lags[int(len(lags) * 0.95)], 1) if lags else None,
        "cpu_ms_per_delivery": {k: round(v / max(delivered, 1) * 1000, 4) for k, v in used.items()},
        "daphne_cores_busy": round(used["daphne"] / (ended - began), 2),
        "host_load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="pairs")
    parser.add_argument("--rate", type=float, default=500.0, help="events/s (default 500)")
    parser.add_argument("--duration", type=float, default=10.0, help="s (default 10)")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout Daphne serves")
    parser.add_argument("--quick", action="store_true", help="both scenarios, tiny (CI)")
    args = parser.parse_args()
    if args.quick:
        runs = [asyncio.run(run(name, 20.0, 1.0, ROOT, quick=True)) for name in SCENARIOS]
        print(json.dumps({r["scenario"]: r for r in runs}, indent=2))
        return
    result = asyncio.run(run(args.scenario, args.rate, args.duration, args.repo.resolve()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
