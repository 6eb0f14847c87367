"""Loaded by a Daphne a test starts with this folder first on its PYTHONPATH and
HUB_CENSUS set (tests/e2e/test_upgrade_release.py): on SIGUSR1, after a full garbage
collection, writes to $HUB_CENSUS/<n>.json (n = 0, 1, ...) how many objects of each
class in CLASSES are alive, and what open connections still hold of their opening:
WebSocket scopes with their headers, coroutines suspended in an ASGI router, and the
handshake's leftovers on Daphne's WebSocket protocols; and the collector's thresholds."""

import os
import signal
import sys

OUT = os.environ.get("HUB_CENSUS")
CLASSES = ("HTTPChannel", "HubWebRequest", "HubWebSocketProtocol", "ConnectionRequest")
ROUTERS = (
    "ProtocolTypeRouter.__call__",
    "URLRouter.__call__",
    "AsyncConsumer.as_asgi.<locals>.app",
)
if OUT and "daphne" in os.path.basename(sys.argv[0]):
    taken = [0]

    def census(signum: int, frame: object) -> None:
        import gc
        import json
        import types

        from messenger_realtime.hub.daphne.websocket_protocol import HANDSHAKE_LEFTOVERS

        gc.collect()
        counts = dict.fromkeys(CLASSES, 0)
        counts.update(websocket_scopes=0, router_frames=0, handshake_leftovers=0)
        for obj in gc.get_objects():
            name = type(obj).__name__
            if name in counts:
                counts[name] += 1
            if name == "HubWebSocketProtocol":
                left = (getattr(obj, attr, None) for attr in HANDSHAKE_LEFTOVERS)
                counts["handshake_leftovers"] += sum(value is not None for value in left)
            elif isinstance(obj, dict) and obj.get("type") == "websocket" and "headers" in obj:
                counts["websocket_scopes"] += 1
            elif isinstance(obj, types.CoroutineType) and obj.__qualname__ in ROUTERS:
                counts["router_frames"] += 1
        counts["gc_threshold"] = list(gc.get_threshold())
        counts["switch_interval"] = sys.getswitchinterval()
        path = os.path.join(OUT, f"{taken[0]}.json")
        taken[0] += 1
        with open(path + ".tmp", "w") as out:
            json.dump(counts, out)
        os.replace(path + ".tmp", path)  # whole, or not there yet

    signal.signal(signal.SIGUSR1, census)
