"""Side-by-side benchmark (issue 7): `bash scripts/bench [--quick]`.

One invocation, the same PostgreSQL and Redis: the raw SQL ceiling (claim 200 + mark
Done), our dispatcher draining into a no-op publisher and into the real channel layer,
PgQueuer and Procrastinate draining the same count of no-op jobs, channels-redis'
group_send row by row and our pipelined push alone, the idle wake, and the open-loop end
to end run through Daphne with hub clients (bench/e2e.py). The drains are interleaved per
repeat so drift on a noisy machine hits every contender alike; medians are reported.
Writes bench/results.json, docs/performance.png and the generated block of
docs/performance.md (a --quick smoke writes nothing and only prints the JSON).
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
from uuid import UUID

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402

from messenger_realtime.backplane.group_names import layer_group  # noqa: E402
from messenger_realtime.backplane.publisher import ChannelLayerPublisher  # noqa: E402
from messenger_realtime.conf.settings import load_options  # noqa: E402
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent  # noqa: E402
from messenger_realtime.dispatch import connections as db  # noqa: E402
from messenger_realtime.dispatch.dispatcher import Dispatcher  # noqa: E402

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


# The bare ceiling: a claim that only bumps attempts (no indexed column changes, so
# PostgreSQL can update in place, HOT), then mark Done; one loop on one connection.
RAW_CLAIM_SQL = (
    "UPDATE messenger.realtime_outbox SET attempts = attempts + 1 WHERE id IN ("
    " SELECT id FROM messenger.realtime_outbox WHERE status = 'Pending'"
    " ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED) RETURNING id"
)

# The same loop with the spec's claim semantics: the claim also pushes next_attempt_at out
# by the backoff and stamps updated_at / row_version, as ours must (a crash after the claim
# means a retry after backoff). Those columns are indexed, so unlike the bare ceiling's
# claim every claimed row gets new index entries.
SPEC_CLAIM_SQL = """
WITH due AS (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = 'Pending' AND next_attempt_at <= now()
    ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED
)
UPDATE messenger.realtime_outbox AS o SET
    attempts = o.attempts + 1, next_attempt_at = now() + interval '2 seconds',
    updated_at = now(), row_version = o.row_version + 1
FROM due WHERE o.id = due.id RETURNING o.id
"""


def sql_loop(n: int, claim: str) -> float:
    """Rows/s of `claim` + mark Done, repeated until nothing is Pending."""
    seed(n)
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
    # The drain measures the worker alone: nobody reads the channels, so backpressure
    # from the hub's queue (HUB_BACKLOG_LIMIT) would only measure its own waits: both
    # bounds at their largest allowed values (E027), one long pass that never waits.
    options = load_options(max_run_duration=600, hub_backlog_limit=10**6)
    dispatcher = Dispatcher(options, publisher, use_lock=False)
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
        await layer.group_add(layer_group(HubTarget.chat(chat)), channel)
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
        group = layer_group(HubTarget.chat(UUID(channels[i % len(channels)].split(".", 1)[1])))
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
    await layer.group_add(layer_group(HubTarget.chat(chat)), channel)
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


async def pipelined_push_only(n: int) -> float:
    """Our publisher's pipelined path alone (no database): n events in chunks of 100."""
    layer = get_channel_layer()
    await layer.flush()
    seed(CHATS)
    channels = await with_subscribers(layer)
    chats = [channel.split(".", 1)[1] for channel in channels]
    events = [
        OutgoingEvent(HubTarget.chat(UUID(chats[i % len(chats)])), "message_received", {"seq": i})
        for i in range(n)
    ]
    publisher = ChannelLayerPublisher(layer)
    started = time.perf_counter()
    for start in range(0, n, 100):
        await publisher.publish_many(events[start : start + 100])
    rate = n / (time.perf_counter() - started)
    await layer.flush()
    return rate


def machine() -> dict[str, Any]:
    with psycopg.connect(db.conninfo()) as conn:
        postgres = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]

    async def redis_info() -> dict[str, Any]:
        return dict(await get_channel_layer().connection(0).info("server"))

    info = asyncio.run(redis_info())
    return {
        "cores": os.cpu_count(),
        "postgres": postgres.split()[0],
        "redis": info["redis_version"],
        "python": sys.version.split()[0],
        "synchronous_commit": sync,
    }


def drains(n: int, repeats: int) -> dict[str, list[float]]:
    """Every drain once per repeat, interleaved, so drift hits all of them alike."""
    import peers

    runs: dict[str, list[float]] = {}
    settings: dict[str, str] = {}

    def record(name: str, rate: float) -> None:
        runs.setdefault(name, []).append(rate)
        print(f"  {name}: {rate:,.0f} rows/s", file=sys.stderr)

    for repeat in range(repeats):
        print(f"drains, repeat {repeat + 1}/{repeats}", file=sys.stderr)
        record("raw_sql", sql_loop(n, RAW_CLAIM_SQL))
        record("spec_sql", sql_loop(n, SPEC_CLAIM_SQL))
        seed(n)
        record("ours_noop", asyncio.run(drain(n, Noop())))
        pgq = peers.pgqueuer_drain(n)
        record("pgqueuer", pgq["rows_per_s"])
        proc = peers.procrastinate_drain(n)
        record("procrastinate", proc["rows_per_s"])
        record("ours_layer", asyncio.run(layer_drain(n)))
        record("rowwise_group_send", asyncio.run(rowwise_group_send(min(n, 5000))))
        record("pipelined_push_only", asyncio.run(pipelined_push_only(min(n, 20_000))))
        settings = {
            "pgqueuer_settings": pgq["settings"],
            "procrastinate_settings": proc["settings"],
        }
    from importlib.metadata import version

    settings["pgqueuer_version"] = version("pgqueuer")
    settings["procrastinate_version"] = version("procrastinate")
    runs["_settings"] = settings  # type: ignore[assignment]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke (CI)")
    args = parser.parse_args()
    import logging

    import e2e
    import report

    logging.disable(logging.WARNING)
    if args.quick:
        n, repeats, samples = 2000, 1, 5
        e2e_args: dict[str, Any] = {
            "rates": [100],
            "duration": 2.0,
            "clients": 20,
            "chats": 10,
            "idle_samples": 3,
            "client_processes": 1,
        }
    else:
        n, repeats, samples = 100_000, 3, 50
        # Finer steps below this box's knee, and a step at issue 49's target (1,500); past
        # 2,000 every step only queues longer.
        e2e_args = {"rates": [250, 500, 750, 1000, 1500, 2000], "duration": 20.0}
    results: dict[str, Any] = {"rows": n, "repeats": repeats, "batch_size": 200}
    results["machine"] = machine()
    runs = drains(n, repeats)
    results["peers"] = runs.pop("_settings")
    results["drain"] = runs
    results["idle_wake_layer_median_ms"] = asyncio.run(idle_wake(samples))
    print("end to end", file=sys.stderr)
    results["e2e"] = e2e.run_e2e(**e2e_args)
    results["finished_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(results, indent=2))
    if not args.quick:
        (ROOT / "bench" / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        report.plot(results, ROOT / "docs" / "performance.png")
        report.write(results, ROOT / "docs" / "performance.md")


if __name__ == "__main__":
    main()
