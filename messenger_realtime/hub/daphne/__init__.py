"""Daphne, made the hub's server: Daphne's implementation of the server seam
(hub/transports/server.py: ServerControls) and every patch the hub makes to Daphne,
Autobahn, Twisted and CPython, all installed by `install`, one call per process that the
app makes itself (messenger_realtime/asgi.py, with_hub, when `serves_this_process`).

- controls.py: DaphneSocket and DaphneStream, the controls a transport gets;
- websocket_protocol.py: its WebSocket protocol (size limits with a Close, the send
  bound, eager writes, plain frames, the scheme, Pings taken);
- web_request.py: its HTTP request (the send bound of event streams, the upgraded
  channel let go);
- server.py: Daphne's server (the application factory that attaches the controls, the
  checkers), shutdown, log scrubbing; capacity.py: the listen backlog, the collector.

Importing this package imports none of Daphne: a process another server serves never
loads it. Apart from the SignalR side of the hub: hub/protocols/ are the hub protocols
(JSON, MessagePack), hub/transports/ the SignalR transports (WebSockets, SSE, long polling).
"""

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from messenger_realtime.hub.process import HubProcess

_installed = False  # the patches are process-wide, as the classes they patch


def serves_this_process() -> bool:
    """Daphne (its CLI, or `runserver` from its Django app) installs Twisted's reactor
    before it imports the ASGI application."""
    return "twisted.internet.reactor" in sys.modules and "daphne.server" in sys.modules


def install(hub: "HubProcess", also_stop: Callable[[], Awaitable[None]] | None = None) -> None:
    """Every patch, once per process, each named here: at shutdown `hub` refuses new
    connections and closes its own, then `also_stop` is awaited (the in-process
    dispatcher's stop in single-process mode)."""
    global _installed
    if _installed:
        return
    _installed = True
    from messenger_realtime.hub.daphne import capacity, server

    server.close_connections_at_shutdown(hub, also_stop)  # Twisted: a reactor trigger
    server.install_protocols()  # Daphne: its WebSocket protocol and HTTP request classes
    server.install_server()  # Daphne's Server: factory (controls), checkers, backlog
    server.format_debug_lazily()  # Autobahn: its per-socket debug dump
    capacity.collect_in_full_rarely()  # CPython: the collector's thresholds
    capacity.switch_often()  # CPython: threads waiting for a busy loop's GIL
    server.scrub_access_logs()  # Daphne's CLI and runserver: tokens out of access logs
