"""The host's one line in its ASGI module, and everything the app needs of the server:

    application = with_hub(get_asgi_application())    # or any ASGI app of the host's

`with_hub` puts the hub's routes (/hubs/messenger, its negotiate and HTTP transports) in
front of the host's application (hub/routing.py), serving one HubProcess (the hub's
shared state in this process: hub/process.py), and, when Daphne serves the process,
applies the app's Daphne integration itself with one call, once per process
(hub/daphne/__init__.py, install): Daphne's server controls for the transports, tokens
scrubbed from Daphne's access log (and from `runserver`'s), the listen backlog and
collector settings a reconnect storm needs, a polite Close to every connection at
shutdown. Any other ASGI server serves the hub through standard ASGI messages and the
hub's own bounded buffers (hub/transports/plain_asgi.py). In single-process mode
(REALTIME_BACKPLANE_ENABLED false) it also starts the dispatcher inside Daphne
(dispatch/in_process.py). A host never calls any of that: forgetting it would leak
tokens into its logs.

This module composes the hub and the dispatcher, so it lives at the app's top level
beside admin.py, not in either part.
"""

from messenger_realtime.hub import daphne
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.routing import Application, routed

__all__ = ["with_hub"]

_integrated = False  # the server is set up once per process, whatever calls with_hub


def with_hub(application: Application) -> Application:
    """`application` with the hub's routes in front, served as the app needs it."""
    hub = HubProcess()
    if daphne.serves_this_process():
        _integrate_daphne(hub)
    return routed(application, hub)


def _integrate_daphne(hub: HubProcess) -> None:
    global _integrated
    if _integrated:
        return
    _integrated = True
    from messenger_realtime.dispatch.in_process import start_if_single_process
    from messenger_realtime.ops.exposition import export_worker_families_from_web
    from messenger_realtime.ops.logging import ensure_handler

    ensure_handler()  # the hub's lines reach stderr under any host logging config
    in_process = start_if_single_process()
    if in_process is not None:
        export_worker_families_from_web()
    daphne.install(hub, also_stop=in_process.stop if in_process else None)
