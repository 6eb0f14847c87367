"""A crashed worker's suspects beside a backlog (issue 29): `python bench/suspects.py
[--suspects N] [--backlog M]`.

A fresh scratch database holds M Pending message rows of one chat (a backlog) and N
suspects of another (rows claimed once and never given an outcome: what a worker killed
mid-batch leaves, due now). The worker (a real `dispatch_realtime` process, real Redis)
starts; measured from its start: when the last suspect is Done, and when the backlog is.
A suspect is claimed, built, pushed and recorded alone (docs/dispatcher.md, Suspects), so
the figure is how the pass shares its time between the two. Prints JSON.
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

from bench import e2e, hubclients  # noqa: E402

DATABASE_URL = hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_suspects"
)
REDIS_URL = hubclients.sibling_url("REDIS_URL", "redis://127.0.0.1:6379/0", "/12")

# %(n)s messages of a chat and their MessageReceived rows in one statement; %(suspect)s
# rows look claimed once and abandoned (attempts 1, claimed_at set, due now).
ROWS_SQL = """
WITH c AS (UPDATE messenger_chat SET last_seq = last_seq + %(n)s WHERE id = %(chat)s
           RETURNING id, last_seq - %(n)s AS base),
m AS (INSERT INTO messenger_message (id, chat_id, seq, sender_id, kind, body, card_text, sent_at)
      SELECT gen_random_uuid(), c.id, c.base + g, %(sender)s, 'Text', 'x', '', now()
      FROM c, generate_series(1, %(n)s) g RETURNING id, chat_id, seq)
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id, seq,
    status, attempts, next_attempt_at, created_at, updated_at, row_version, claimed_at)
SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', chat_id, id, seq, 'Pending',
       CASE WHEN %(suspect)s THEN 1 ELSE 0 END, now(), now(), now(), 0,
       CASE WHEN %(suspect)s THEN now() END
FROM m
"""
PENDING_OF = (
    "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending' AND chat_id = %s"
)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    result: dict[str, Any] = {"suspects": args.suspects, "backlog": args.backlog}
    async with contextlib.AsyncExitStack() as stack:
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        backlog, suspects = await e2e.seed(conn, 2, 1, 1)
        for chat, n, suspect in ((backlog, args.backlog, False), (suspects, args.suspects, True)):
            params = {"chat": chat.id, "n": n, "sender": chat.members[0], "suspect": suspect}
            await conn.execute(ROWS_SQL, params)
        await conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
        worker_env = {**env, "MESSENGER_REALTIME_METRICS_PORT": "0"}
        started = time.monotonic()
        worker = await hubclients.Service.start(
            "suspects-worker",
            [sys.executable, "manage.py", "dispatch_realtime"],
            worker_env,
            r"\bdispatching\b",
        )
        stack.push_async_callback(worker.stop)
        ends: dict[str, float] = {}
        while len(ends) < 2 and time.monotonic() - started < args.deadline:
            for name, chat in (("suspects", suspects), ("backlog", backlog)):
                row = await (await conn.execute(PENDING_OF, [chat.id])).fetchone()
                if name not in ends and row is not None and row[0] == 0:
                    ends[name] = round(time.monotonic() - started, 2)
            await asyncio.sleep(0.05)  # the poll's pace (a bench, not a test)
        result.update(
            {
                "suspects_done_s": ends.get("suspects"),
                "backlog_done_s": ends.get("backlog"),
            }
        )
    result["host_load"] = os.getloadavg()[0]
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--suspects", type=int, default=500)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--deadline", type=float, default=300.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
