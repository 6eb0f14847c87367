"""The worker's CPU per pass and per row, apart (issue 15, item 2): in one process, a
real Dispatcher (no lease) runs passes over K freshly committed rows each, for several K,
and a least-squares line over (K, CPU per pass) splits the cost into a fixed part per pass
and a part per row. CPU is the process's (the build thread's included), counted only
around run_pass(): the owners' commits happen before each pass, outside the count.

    .venv/bin/python bench/worker_pass.py [--passes 300] [--sizes 1,5,20,50]

Own database and Redis db (E2E_DATABASE_URL, E2E_REDIS_URL, as bench/e2e.py); the
worker's log lines go to a file (LOG_FILE, default a temporary one), as they would to a
collector. Prints JSON.
"""

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import e2e  # noqa: E402


def prepare_database(env: dict[str, str]) -> None:
    for argv in (["scripts/ensure_database.py", "--fresh"], ["manage.py", "migrate", "-v0"]):
        subprocess.run([sys.executable, *argv], env=env, check=True, cwd=ROOT)


async def measure(passes: int, sizes: list[int]) -> dict[str, Any]:
    from channels.layers import get_channel_layer

    from messenger_realtime.backplane.publisher import ChannelLayerPublisher
    from messenger_realtime.conf.settings import load_options
    from messenger_realtime.dispatch.dispatcher import Dispatcher
    from messenger_realtime.uuid7 import uuid7

    options = load_options()
    dispatcher = Dispatcher(options, ChannelLayerPublisher(get_channel_layer()), use_lock=False)
    owner = await psycopg.AsyncConnection.connect(e2e.DATABASE_URL, autocommit=True)
    chats = await e2e.seed(owner, 250, 2, 1)
    per_size: dict[int, float] = {}
    try:
        for size in [1, *sizes]:  # the first, size 1, warms up
            spent = 0.0
            for n in range(passes):
                for i in range(size):
                    chat = chats[(n * size + i) % len(chats)]
                    await owner.execute(
                        e2e.SEND_SQL,
                        {
                            "chat": chat.id,
                            "sender": chat.members[0],
                            "message": uuid7(),
                            "entry": uuid7(),
                            "body": "hello",
                        },
                    )
                before = time.process_time()
                result = await dispatcher.run_pass()
                spent += time.process_time() - before
                assert result.dispatched == size, result
            per_size[size] = spent / passes * 1000
    finally:
        await dispatcher.close()
        await owner.close()
    xs = sizes
    ys = [per_size[k] for k in xs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread
    return {
        "cpu_ms_per_pass": {str(k): round(per_size[k], 3) for k in xs},
        "fixed_ms_per_pass": round(my - slope * mx, 3),
        "ms_per_row": round(slope, 4),
        "at_500_msg_s_with_22_rows_per_pass": round((my - slope * mx) / 22 + slope, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--sizes", default="1,5,20,50")
    args = parser.parse_args()
    env = {**os.environ, "DATABASE_URL": e2e.DATABASE_URL, "REDIS_URL": e2e.REDIS_URL}
    env.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    prepare_database(env)
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
    import django

    django.setup()
    from messenger_realtime.conf.settings import load_options
    from messenger_realtime.dispatch.connections import dedicate_django_connection

    dedicate_django_connection(statement_timeout=load_options().build_timeout)
    log_file = os.environ.get("LOG_FILE") or tempfile.mkstemp(suffix=".log")[1]
    with open(log_file, "a") as stream:
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(stream)
        sizes = [int(s) for s in args.sizes.split(",")]
        print(json.dumps(asyncio.run(measure(args.passes, sizes)), indent=2))


if __name__ == "__main__":
    main()
