"""Loaded by a Daphne that bench/connections.py --tracemalloc starts (this folder first on
its PYTHONPATH): traces allocations from the start, and on SIGUSR1 writes a snapshot to
$BENCH_TRACEMALLOC/<n>.snapshot (0 before the connects, 1 after), then <n>.done, each
after a full garbage collection (live objects only)."""

import os
import signal
import sys
import tracemalloc

OUT = os.environ.get("BENCH_TRACEMALLOC")
if OUT and "daphne" in os.path.basename(sys.argv[0]):
    tracemalloc.start(12)
    taken = [0]

    def dump(signum: int, frame: object) -> None:
        n = taken[0]
        taken[0] += 1
        import gc

        gc.collect()  # what is alive, not cyclic garbage waiting for a collection
        snapshot = tracemalloc.take_snapshot()
        snapshot.dump(os.path.join(OUT, f"{n}.snapshot"))
        open(os.path.join(OUT, f"{n}.done"), "w").close()

    signal.signal(signal.SIGUSR1, dump)
