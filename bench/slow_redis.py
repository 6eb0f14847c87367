"""Latency is not a fault (issue 43): the commit -> client latency with Redis 100 ms away
each way (a userspace proxy that holds every byte that long: this kernel has no netem).

    .venv/bin/python bench/slow_redis.py [--delay 0.1] [--messages 60] [--rate 5] [--repo PATH]

One Daphne and one worker reach Redis (the channel layer and the rate limits) through the
proxy; PostgreSQL is direct. An owner posts `--messages` over REST at `--rate` a second
into a chat; the other member listens on a raw hub connection. Prints the REST call's
time and the time from the REST call to the client, p50 and p95, without the first two
messages (the processes' first connections to Redis cross the link several times).
Own database (bench/one_user.py's) and Redis db 9.
"""

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import websockets.sync.client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import isolation, one_user  # noqa: E402
from tests.support.proxy import TcpProxy  # noqa: E402

RS = "\x1e"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.1, help="seconds, each way")
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--rate", type=float, default=5.0, help="messages a second")
    parser.add_argument("--repo", type=Path, default=ROOT, help="serve from this checkout")
    args = parser.parse_args()
    redis = urlsplit(one_user.REDIS_URL)
    proxy = TcpProxy(redis.port or 6379)
    proxy.delay = args.delay
    slow_url = redis._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()
    ids = one_user.prepare(slow_url)
    stack = isolation.Stack(args.repo)
    try:
        figures = measure(stack, ids, args)
    finally:
        stack.close()
        proxy.close()
    print(json.dumps({"delay_each_way_s": args.delay, **figures}, indent=1))


def measure(stack: isolation.Stack, ids: dict, args: argparse.Namespace) -> dict:
    base = f"http://127.0.0.1:{stack.port}"
    owner, member = stack.token(ids["abuser"]), stack.token(ids["bystander"])
    url = f"ws://127.0.0.1:{stack.port}/hubs/messenger?access_token={member}"
    deadline = time.monotonic() + 60
    while True:  # Daphne may still be starting
        try:
            ws = websockets.sync.client.connect(url)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    rest, total = [], []
    with ws:
        ws.send(json.dumps({"protocol": "json", "version": 1}) + RS)
        ws.recv(timeout=30)
        for n in range(args.messages):
            request = urllib.request.Request(
                f"{base}/api/chats/{ids['chat']}/messages",
                data=json.dumps({"body": f"m{n}"}).encode(),
                method="POST",
                headers={"Authorization": f"Bearer {owner}", "Content-Type": "application/json"},
            )
            started = time.monotonic()
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
            answered = time.monotonic()
            while True:
                frame = str(ws.recv(timeout=30))
                records = [json.loads(r) for r in frame.split(RS) if r]
                if any(r.get("target") == "message_received" for r in records):
                    break
            ws.send('{"type":6}' + RS)  # alive: the hub's client timeout is 30 s
            rest.append(answered - started)
            total.append(time.monotonic() - started)
            time.sleep(max(0.0, 1 / args.rate - (time.monotonic() - started)))
    warm_rest, warm_total = rest[2:], total[2:]
    with psycopg.connect(one_user.DATABASE_URL) as conn:  # nothing retried for being slow
        (retried,) = conn.execute(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE attempts > 1"
            " OR status = 'Quarantined' OR last_error <> ''"
        ).fetchone() or (0,)
    return {
        "retried_or_quarantined": retried,
        "messages": len(warm_total),
        "rest_p50_ms": one_user.pctl(warm_rest, 50),
        "rest_p95_ms": one_user.pctl(warm_rest, 95),
        "to_client_p50_ms": one_user.pctl(warm_total, 50),
        "to_client_p95_ms": one_user.pctl(warm_total, 95),
        "first_two_ms": [round(t * 1000) for t in total[:2]],
    }


if __name__ == "__main__":
    main()
