"""Loaded by a Daphne a test starts with this folder first on its PYTHONPATH and
HUB_CENSUS set (tests/e2e/test_upgrade_release.py): on SIGUSR1, after a full garbage
collection, writes how many objects of each class in CLASSES are alive to
$HUB_CENSUS/<n>.json (n = 0, 1, ...)."""

import os
import signal
import sys

OUT = os.environ.get("HUB_CENSUS")
CLASSES = ("HTTPChannel", "HubWebRequest", "HubWebSocketProtocol")
if OUT and "daphne" in os.path.basename(sys.argv[0]):
    taken = [0]

    def census(signum: int, frame: object) -> None:
        import gc
        import json

        gc.collect()
        counts = dict.fromkeys(CLASSES, 0)
        for obj in gc.get_objects():
            name = type(obj).__name__
            if name in counts:
                counts[name] += 1
        path = os.path.join(OUT, f"{taken[0]}.json")
        taken[0] += 1
        with open(path + ".tmp", "w") as out:
            json.dump(counts, out)
        os.replace(path + ".tmp", path)  # whole, or not there yet

    signal.signal(signal.SIGUSR1, census)
