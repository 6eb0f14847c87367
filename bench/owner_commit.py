"""What stream offsets cost the owner's commit (issue 28):
`python bench/owner_commit.py [--posts N] [--writers W]`.

The owner's own transaction, as the product runs it (`services.post_message`: the chat's
`last_seq`, the message, `outbox.enqueue` with its offset, NOTIFY, commit), in W writer
processes, each with its own Django connection, with and without the stream offsets
(without: `take_offsets` is skipped, the outbox row gets none: the code before streams).
Three shapes: one writer; W writers into one chat (they commit in turn on the chat's row
lock anyway); W writers into W chats. Measured per commit: wall time p50/p95 as the
writer sees it, and the CPU of the writer's PostgreSQL backend (from /proc, so the
database's own cost) and of the writer process. Fresh scratch database. Prints JSON.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import e2e, hubclients  # noqa: E402

DATABASE_URL = os.environ.get("OWNER_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_owner"
)
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) a PostgreSQL backend on this machine has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def writer(chat_id: str, sender_id: str, posts: int, offsets: bool, out: Any) -> None:
    """One writer process: `posts` messages into `chat_id` as `sender_id`."""
    os.environ["DATABASE_URL"] = DATABASE_URL
    import django

    django.setup()
    from django.db import connection

    from messenger_realtime.outbox import intents
    from project.messenger import services

    if not offsets:
        intents.take_offsets = lambda streams, using="default": [None] * len(streams)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    for n in range(20):  # warm-up: plans cached, pages hot
        services.post_message(sender_id, chat_id, f"warm {n}")
    times = []
    cpu0, own0 = backend_cpu(pid), time.process_time()
    for n in range(posts):
        began = time.perf_counter()
        services.post_message(sender_id, chat_id, f"message {n}")
        times.append(time.perf_counter() - began)
    out.put((times, backend_cpu(pid) - cpu0, time.process_time() - own0))
    connection.close()


def shape(chats: list[tuple[str, str]], posts: int, offsets: bool) -> dict[str, Any]:
    """Writers (one per (chat, sender)) started together; their figures pooled."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [
        context.Process(target=writer, args=(chat, sender, posts, offsets, out))
        for chat, sender in chats
    ]
    for proc in procs:
        proc.start()
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    times = sorted(t for r in results for t in r[0])
    commits = len(times)
    return {
        "commits": commits,
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(times[int(0.95 * commits) - 1] * 1000, 3),
        "db_cpu_ms_per_commit": round(sum(r[1] for r in results) / commits * 1000, 3),
        "writer_cpu_ms_per_commit": round(sum(r[2] for r in results) / commits * 1000, 3),
    }


def seed(writers: int) -> tuple[list[str], list[str]]:
    """`writers` users, each in every one of `writers` group chats."""
    os.environ["DATABASE_URL"] = DATABASE_URL
    import django

    django.setup()
    from django.db import connection

    from project.messenger import services
    from tests.support.factories import UserFactory

    users = [UserFactory(username=f"owner{n}") for n in range(writers)]
    ids = [u.id for u in users]
    others = ids[1:] or [UserFactory().id]
    chats = [services.create_chat(ids[0], others, title=f"c{n}") for n in range(writers)]
    connection.close()
    return [str(c.id) for c in chats], [str(i) for i in ids]


async def prepare() -> None:
    env = {**os.environ, "DATABASE_URL": DATABASE_URL}
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=2000, help="commits per writer")
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(prepare())
    chats, users = seed(args.writers)
    shapes = {
        "one writer": [(chats[0], users[0])],
        f"{args.writers} writers, one chat": [(chats[0], u) for u in users],
        f"{args.writers} writers, {args.writers} chats": list(zip(chats, users, strict=True)),
    }
    report: dict[str, Any] = {"posts_per_writer": args.posts, "shapes": {}}
    for name, writers in shapes.items():
        # Alternate so drift in the machine's speed hits both alike.
        without = shape(writers, args.posts, offsets=False)
        with_offsets = shape(writers, args.posts, offsets=True)
        ratio = {
            key: round(with_offsets[key] / without[key], 3)
            for key in ("p50_ms", "p95_ms", "db_cpu_ms_per_commit", "writer_cpu_ms_per_commit")
            if without[key]
        }
        report["shapes"][name] = {
            "without_offsets": without,
            "with_offsets": with_offsets,
            "ratio": ratio,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
