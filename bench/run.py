"""Side-by-side drain benchmark (issue 7, first part). `bash scripts/bench [--quick]`.

Measures, on the same PostgreSQL and Redis, in one run: the raw SQL ceiling (claim 200 +
mark Done), our dispatcher draining into a no-op publisher, our dispatcher draining into
the real channel layer (pipelined), channels-redis' own group_send row by row, and the
idle wake (commit -> delivered to a channel-layer subscriber). Medians of repeats; JSON
to bench/results.json and a table to docs/performance.md.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402

from messenger_realtime import db  # noqa: E402
from messenger_realtime.conf import load_options  # noqa: E402
from messenger_realtime.dispatcher import Dispatcher  # noqa: E402
from messenger_realtime.groups import layer_group  # noqa: E402
from messenger_realtime.payloads import OutgoingEvent  # noqa: E402
from messenger_realtime.publisher import ChannelLayerPublisher  # noqa: E402

CHATS = 250


def seed(n: int) -> None:
    """n MessageReceived rows over CHATS chats, with their messages, all Pending."""
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("TRUNCATE messenger.realtime_outbox")
        conn.execute("TRUNCATE messenger_message, messenger_chat CASCADE")
        conn.execute(
            "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
            " SELECT gen_random_uuid(), 'Group', 'bench ' || g, 0, now(), now()"
            " FROM generate_series(1, %s) g",
            (CHATS,),
        )
        conn.execute(
            "INSERT INTO messenger_message (id, chat_id, seq, kind, body, card_text, sent_at)"
            " SELECT gen_random_uuid(), c.id, g, 'Text', 'hello ' || g, '', now()"
            " FROM generate_series(1, %s) g"
            " JOIN (SELECT id, row_number() OVER () - 1 AS k FROM messenger_chat) c"
            "   ON c.k = g %% %s",
            (n, CHATS),
        )
        # Ids in time order like the app's UUIDv7: order by seq.
        conn.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id,"
            " seq, status, attempts, next_attempt_at, created_at, updated_at, row_version)"
            " SELECT m.id, 'MessageReceived', 'ChatGroup', m.chat_id, m.id, m.seq, 'Pending',"
            " 0, now(), now(), now(), 0 FROM messenger_message m"
        )
        conn.execute("VACUUM ANALYZE messenger.realtime_outbox")


def raw_sql_ceiling(n: int) -> float:
    seed(n)
    claim = (
        "UPDATE messenger.realtime_outbox SET attempts = attempts + 1 WHERE id IN ("
        " SELECT id FROM messenger.realtime_outbox WHERE status = 'Pending'"
        " ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED) RETURNING id"
    )
    done = "UPDATE messenger.realtime_outbox SET status = 'Done' WHERE id = ANY(%s)"
    started = time.perf_counter()
    moved = 0
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        while ids := [r[0] for r in conn.execute(claim).fetchall()]:
            conn.execute(done, (ids,))
            moved += len(ids)
    return moved / (time.perf_counter() - started)


class Noop:
    async def publish(self, event: OutgoingEvent) -> None:
        pass

    async def publish_many(self, events: list[OutgoingEvent]) -> list[None]:
        return [None] * len(events)


async def drain(n: int, publisher: Any) -> float:
    dispatcher = Dispatcher(load_options(max_run_duration=3600), publisher, use_lock=False)
    started = time.perf_counter()
    result = await dispatcher.run_pass()
    elapsed = time.perf_counter() - started
    await dispatcher.close()
    assert result.dispatched == n, result
    return n / elapsed


async def with_subscribers(layer: Any) -> list[str]:
    """One listening channel per chat group, as if one client were in each chat."""
    with psycopg.connect(db.conninfo()) as conn:
        chats = [r[0] for r in conn.execute("SELECT id FROM messenger_chat").fetchall()]
    channels = []
    for chat in chats:
        channel = f"bench.{chat.hex}"
        await layer.group_add(layer_group(f"chat:{chat}"), channel)
        channels.append(channel)
    return channels


async def layer_drain(n: int) -> float:
    seed(n)
    layer = get_channel_layer()
    await layer.flush()
    await with_subscribers(layer)
    rate = await drain(n, ChannelLayerPublisher(layer))
    await layer.flush()
    return rate


async def rowwise_group_send(n: int) -> float:
    layer = get_channel_layer()
    await layer.flush()
    seed(CHATS)
    channels = await with_subscribers(layer)
    started = time.perf_counter()
    for i in range(n):
        group = layer_group("chat:" + channels[i % len(channels)].split(".", 1)[1])
        await layer.group_send(group, {"type": "realtime.event", "payload": {"seq": i}})
    rate = n / (time.perf_counter() - started)
    await layer.flush()
    return rate


async def idle_wake(samples: int) -> float:
    """Median ms from an owner's commit to the event in a subscriber's channel."""
    seed(CHATS)
    layer = get_channel_layer()
    await layer.flush()
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("TRUNCATE messenger.realtime_outbox")
        chat, message = conn.execute("SELECT chat_id, id FROM messenger_message LIMIT 1").fetchone()  # type: ignore[misc]
    channel = "bench.idle"
    await layer.group_add(layer_group(f"chat:{chat}"), channel)
    options = load_options(polling_interval=60)
    dispatcher = Dispatcher(options, ChannelLayerPublisher(layer), use_lock=False)
    runner = asyncio.create_task(dispatcher.run())
    await asyncio.sleep(0.5)  # let it settle into its idle wait (a benchmark, not a test)
    waits = []
    owner = await psycopg.AsyncConnection.connect(db.conninfo(), autocommit=True)
    for _ in range(samples):
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        async with owner.transaction():
            await owner.execute(
                "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id,"
                " message_id, seq, status, attempts, next_attempt_at, created_at, updated_at,"
                " row_version) SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup',"
                " chat_id, id, seq, 'Pending', 0, now(), now(), now(), 0"
                " FROM messenger_message WHERE id = %s",
                (message,),
            )
            await owner.execute("NOTIFY realtime_outbox")
        await asyncio.wait_for(layer.receive(channel), 10)
        waits.append((time.perf_counter() - started) * 1000)
    await owner.close()
    dispatcher.stop.set()
    await runner
    return statistics.median(waits)


def median_of(repeats: int, measure: Any) -> float:
    return statistics.median(measure() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke (CI)")
    args = parser.parse_args()
    n, repeats, samples = (2000, 1, 5) if args.quick else (100_000, 3, 50)
    import logging

    logging.disable(logging.WARNING)
    results: dict[str, Any] = {"rows": n, "repeats": repeats, "batch_size": 200}
    results["raw_sql_rows_per_s"] = median_of(repeats, lambda: raw_sql_ceiling(n))
    results["noop_rows_per_s"] = median_of(
        repeats, lambda: (seed(n), asyncio.run(drain(n, Noop())))[1]
    )
    results["layer_rows_per_s"] = median_of(repeats, lambda: asyncio.run(layer_drain(n)))
    results["rowwise_group_send_per_s"] = asyncio.run(rowwise_group_send(min(n, 5000)))
    results["idle_wake_median_ms"] = asyncio.run(idle_wake(samples))
    results["noop_vs_raw_sql"] = results["noop_rows_per_s"] / results["raw_sql_rows_per_s"]
    results["layer_vs_rowwise"] = results["layer_rows_per_s"] / results["rowwise_group_send_per_s"]
    print(json.dumps(results, indent=2))
    if not args.quick:
        (ROOT / "bench" / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
