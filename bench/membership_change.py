"""What one membership change costs the hub (issue 26): `python bench/membership_change.py`.

    .venv/bin/python bench/membership_change.py [--members N] [--changes K] [--repo PATH]

One chat of N members (default 50), each with a raw SignalR JSON client connected to one
real Daphne (bench/hubclients.py). K times (default 10): a member is added the way the
owner does it (the participant row and the chat's membership version raised, in one
transaction), then one event of the chat read at the new version is pushed through the
channel layer, as the worker would push the next message; every client receives it.
For comparison, K events at an unchanged version. Measured per change and per plain
event: Daphne's CPU (from /proc) and the scans of the participant table
(pg_stat_user_tables, read after the statistics are flushed). `--repo` serves Daphne from
another checkout (an older commit, for "before"). Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import psycopg  # noqa: E402
import redis  # noqa: E402

from bench import e2e, hubclients  # noqa: E402

DATABASE_URL = os.environ.get("MEMBERSHIP_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_members"
)
REDIS_URL = os.environ.get("MEMBERSHIP_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/12"
)
os.environ["REDIS_URL"] = REDIS_URL  # this process's layer: the same Redis as Daphne's
STATS_SETTLE = 11.0  # s: an idle backend flushes its table statistics within 10 s (PG 15)

# The owner's add_participant, as one transaction: a new user joins, the version rises.
ADD_MEMBER_SQL = [
    "INSERT INTO messenger_user (id, password, is_superuser, username, first_name, last_name,"
    " email, is_staff, is_active, date_joined, display_name)"
    " VALUES (%(user)s, '', false, %(name)s, '', '', '', false, true, now(), '')",
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, last_read_seq,"
    " joined_at) VALUES (%(participant)s, %(chat)s, %(user)s, true, 0, now())",
    "UPDATE messenger_chat SET membership_version = membership_version + 1 WHERE id = %(chat)s"
    " RETURNING membership_version",
]
SCANS_SQL = (
    "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
    " WHERE relname = 'messenger_participant'"
)


async def scans(conn: psycopg.AsyncConnection[Any]) -> int:
    await asyncio.sleep(STATS_SETTLE)  # let Daphne's backends flush (not synchronisation)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await (await conn.execute(SCANS_SQL)).fetchone()
    return int(row[0]) if row else 0


async def push(chat: uuid.UUID, seq: int, version: int) -> str:
    import django

    django.setup()
    from channels.layers import get_channel_layer

    from messenger_realtime.backplane.publisher import ChannelLayerPublisher
    from messenger_realtime.contracts.events import HubTarget, OutgoingEvent

    message_id = f"m{seq}"
    payload = {"chatId": str(chat), "messageId": message_id, "seq": seq, "body": "hello"}
    event = OutgoingEvent(HubTarget.chat(chat), "message_received", payload, False, version)
    await ChannelLayerPublisher(get_channel_layer()).publish_many([event])
    return message_id


async def step(
    clients: hubclients.HubClients,
    conn: psycopg.AsyncConnection[Any],
    daphne: int,
    members: int,
    changes: int,
    chat: uuid.UUID,
    change: bool,
    seq: int,
) -> tuple[dict[str, float], int]:
    """K events (after a membership change each, or not); cost per event."""
    before_scans = await scans(conn)
    before = hubclients.cpu_sample({"daphne": [daphne]})["daphne"]
    for _ in range(changes):
        version = 0
        if change:
            async with conn.transaction():
                ids = {"user": uuid.uuid4(), "participant": uuid.uuid4(), "chat": chat}
                for statement in ADD_MEMBER_SQL:
                    cur = await conn.execute(statement, {**ids, "name": f"new-{ids['user']}"})
                version = int((await cur.fetchone())[0])  # type: ignore[index]
        else:
            row = await (
                await conn.execute(
                    "SELECT membership_version FROM messenger_chat WHERE id = %s", [chat]
                )
            ).fetchone()
            version = int(row[0])  # type: ignore[index]
        await push(chat, seq, version)
        seq += 1
        got = await clients.ask({"cmd": "until", "unique": members, "idle": 5.0, "limit": 30})
        if got["unique"] != members:
            raise RuntimeError(f"{got['unique']} of {members} clients got event {seq - 1}")
        await clients.ask({"cmd": "collect"})
    after = hubclients.cpu_sample({"daphne": [daphne]})["daphne"]
    used = sum(v - before.get(k, 0.0) for k, v in after.items())
    after_scans = await scans(conn)
    return {
        "daphne_cpu_ms": round(used / changes * 1000, 1),
        "participant_scans": round((after_scans - before_scans) / changes, 1),
    }, seq


async def run(members: int, changes: int, repo: Path) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    admin = redis.Redis.from_url(REDIS_URL)
    admin.flushdb()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(admin.flushdb)
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        (chat,) = await e2e.seed(conn, 1, members, 1)
        tokens = hubclients.mint_tokens(chat.members)
        port = hubclients.free_port()
        argv = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
        argv += ["project.asgi:application"]
        daphne = await hubclients.Service.start(
            "daphne", argv, {**env, "PYTHONPATH": str(repo)}, "Listening on TCP address", cwd=repo
        )
        stack.push_async_callback(daphne.stop)
        clients = await hubclients.HubClients.start(
            f"http://127.0.0.1:{port}", [tokens[u] for u in chat.members]
        )
        stack.push_async_callback(clients.stop)
        pid = daphne.proc.pid
        # Warm-up: every connection has delivered once (and read what it needed to).
        _, seq = await step(clients, conn, pid, members, 2, chat.id, False, 1)
        plain, seq = await step(clients, conn, pid, members, changes, chat.id, False, seq)
        changed, seq = await step(clients, conn, pid, members, changes, chat.id, True, seq)
    return {
        "repo": str(repo),
        "members_connected": members,
        "per_event_unchanged": plain,
        "per_event_after_a_member_added": changed,
        "host_load": os.getloadavg()[0],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout Daphne serves")
    args = parser.parse_args()
    result = asyncio.run(run(args.members, args.changes, args.repo.resolve()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
