"""What a hub process needs to take a reconnect storm, beyond its own code: after a
deploy or a crash every client of a process comes back at once (docs/performance.md,
"The storm converges").

- The listen backlog: connections the kernel queues for Daphne to accept (it caps this
  at net.core.somaxconn). Twisted listens with 50; a storm overflowed it, and a client
  whose handshake the kernel dropped sat out TCP's retransmission backoff, up to its
  request timeout (100 s), before it came back. Daphne's endpoints (-b/-p, -u, -e)
  listen with LISTEN_BACKLOG unless one names its own `backlog=`.
- The collector: a hub process holds tens of thousands of long-lived objects (its
  connections), and CPython's full collection walks every one. In a storm of 10,000
  clients, where the heap grows fast, the default thresholds ran 30 full collections
  of ~0.37 s each, a fifth of the process's CPU. The hub's Daphne runs a full
  collection after at most FULL_COLLECTION_AFTER middle-generation collections instead
  of 10; the young ones, which free almost all of its garbage, run as before.
- The interpreter's switch interval: the event loop shares the GIL with the threads
  that run Django's views (REST) and the hub's reads. After each database round trip
  such a thread waits for the loop to let go of the GIL, up to the switch interval
  (5 ms by default) while the loop is busy, and a view makes several: one user's
  32 connections flooding moved a bystander's REST p95 from 18 to 39-42 ms, mostly
  waiting for the GIL. At SWITCH_INTERVAL (1 ms) it moved to 28-29 ms
  (bench/one_user.py, docs/reliability.md).
"""

import gc
import re
import sys
from typing import Any

LISTEN_BACKLOG = 4096
# Generation-1 collections between two full collections at most (CPython's default: 10).
FULL_COLLECTION_AFTER = 100
SWITCH_INTERVAL = 0.001  # seconds (CPython's default: 0.005)
# Endpoint kinds whose listen() takes a backlog (an adopted fd: its owner listened).
_BACKLOG_KINDS = ("tcp", "tcp6", "ssl", "unix")


def with_backlog(endpoint: str) -> str:
    """A Twisted server endpoint description listening with LISTEN_BACKLOG, unless it
    says its own `backlog=` (daphne -e tcp:port=8000:backlog=N) or takes none."""
    kind, _, rest = endpoint.partition(":")
    # Parameters are colon-separated; a colon inside a value is escaped ("\:").
    parameters = re.split(r"(?<!\\):", rest)
    if kind not in _BACKLOG_KINDS or any(p.startswith("backlog=") for p in parameters):
        return endpoint
    return f"{endpoint}:backlog={LISTEN_BACKLOG}"


def listen_with_backlog(server_class: Any) -> None:
    """Daphne's server listens on its endpoints with_backlog()."""
    run = server_class.run

    def run_with_backlog(server: Any) -> None:
        server.endpoints = [with_backlog(str(e)) for e in server.endpoints]
        run(server)

    server_class.run = run_with_backlog


def switch_often() -> None:
    """This process's threads take the GIL from a busy event loop within SWITCH_INTERVAL."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def collect_in_full_rarely() -> None:
    """This process's full collections at most every FULL_COLLECTION_AFTER middle ones."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)
