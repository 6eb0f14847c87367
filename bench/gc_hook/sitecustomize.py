"""Loaded by a Daphne started with this folder first on its PYTHONPATH and HUB_GC_STATS
set (any bench passes its environment on, e.g. bench/storm.py): counts each
generation's collections and the CPU they took (the collecting thread's, from a
collection's start to its stop), and every 2 s writes them, with the process's CPU so
far, to $HUB_GC_STATS/gc-<pid>.json (docs/performance.md, "The collector")."""

import os
import sys

OUT = os.environ.get("HUB_GC_STATS")
if OUT and "daphne" in os.path.basename(sys.argv[0]):
    import gc
    import json
    import threading
    import time

    counts = {generation: [0, 0.0] for generation in ("0", "1", "2")}  # collections, CPU s
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            entry = counts[str(info["generation"])]
            entry[0] += 1
            entry[1] += time.thread_time() - started[0]

    def write() -> None:
        path = os.path.join(OUT, f"gc-{os.getpid()}.json")
        while True:
            time.sleep(2)
            state = {"collections": counts, "process_cpu_s": time.process_time()}
            with open(path + ".tmp", "w") as out:
                json.dump(state, out)
            os.replace(path + ".tmp", path)

    gc.callbacks.append(timed)
    threading.Thread(target=write, daemon=True).start()
