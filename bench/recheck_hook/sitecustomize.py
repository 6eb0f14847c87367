"""Loaded by a Daphne that bench/presence.py --recheck starts (this folder first on its
PYTHONPATH): every presence change is checked against the port as it is delivered
(hub/presence/visibility.py's RECHECK_AFTER set to 0), so the bench measures what a
change costs when every watcher's check is due, as a minute after the watches were made.
The checks' port reads are counted and written to $BENCH_PRESENCE_RECHECK every 0.2 s."""

import os
import sys

OUT = os.environ.get("BENCH_PRESENCE_RECHECK")
if OUT and "daphne" in os.path.basename(sys.argv[0]):
    import threading
    import time
    from typing import Any

    from messenger_realtime.hub.presence import visibility

    visibility.RECHECK_AFTER = 0.0
    reads = [0]
    read = visibility.read_viewers

    def counted(*args: Any) -> Any:  # before hub/process.py imports it (Django set up)
        reads[0] += 1
        return read(*args)

    visibility.read_viewers = counted

    def write() -> None:
        while True:
            time.sleep(0.2)
            with open(OUT + ".tmp", "w") as out:
                out.write(str(reads[0]))
            os.replace(OUT + ".tmp", OUT)

    threading.Thread(target=write, daemon=True).start()
