"""ASGI entry point served by Daphne: Django for HTTP, the hub for WebSockets."""

import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

django_asgi_app = get_asgi_application()

# Imports that need Django set up first.
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import re_path  # noqa: E402

from messenger_realtime.hub.routing import with_hub  # noqa: E402

# The hub's routes first: its WebSocket, negotiate, Server-Sent Events and long polling
# at /hubs/messenger (bearer tokens, or the session of the project's own pages).
application = with_hub(
    ProtocolTypeRouter(
        {
            "http": URLRouter(
                [
                    # Django, with static files (the web client, the demo page) straight
                    # from the app and npm; production puts collectstatic's output on a CDN.
                    re_path(r"", ASGIStaticFilesHandler(django_asgi_app)),  # type: ignore[arg-type]
                ]
            ),
        }
    )
)

if "twisted.internet.reactor" in sys.modules:  # served by Daphne
    from messenger_realtime.dispatch.in_process import start_if_single_process
    from messenger_realtime.hub.daphne.server import install_daphne_integration

    in_process = start_if_single_process()
    if in_process is not None:
        from messenger_realtime.ops.exposition import export_worker_families_from_web

        export_worker_families_from_web()
    install_daphne_integration(also_stop=in_process.stop if in_process else None)
