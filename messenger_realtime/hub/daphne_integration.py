"""Daphne integration: polite Close on shutdown, and no tokens in access logs.

Daphne stops on SIGTERM/SIGINT through Twisted's reactor; a "before shutdown" trigger
runs while sockets are still open, so every live connection gets
{"type":7,"allowReconnect":true} and the clients reconnect (to another process).

Browsers must put the access token in the WebSocket URL's query string, and Daphne's
access log prints HTTP request paths with their query; the scrubbing log generator
replaces such values with [redacted].
"""

import asyncio
import logging
import re
import sys
from typing import Any

from .consumer import LIVE_CONNECTIONS

logger = logging.getLogger(__name__)

_SECRET_QUERY = re.compile(r"((?:access_token|id)=)[^&\s\"]*")


def scrub_query_secrets(text: str) -> str:
    """Hide access tokens and connection tokens in a logged URL."""
    return _SECRET_QUERY.sub(r"\1[redacted]", text)


async def close_all_connections() -> int:
    connections = list(LIVE_CONNECTIONS)
    await asyncio.gather(*(c.shutdown() for c in connections), return_exceptions=True)
    return len(connections)


def install_daphne_integration() -> None:
    """Call from the ASGI module when served by Daphne (Twisted's reactor is loaded)."""
    from twisted.internet import defer, reactor

    def before_shutdown() -> Any:
        future = asyncio.ensure_future(close_all_connections())
        future.add_done_callback(
            lambda f: logger.info(
                "hub shutdown", extra={"action": "shutdown", "closed": f.result()}
            )
        )
        return defer.Deferred.fromFuture(future)

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]

    # Daphne's CLI imports the application before it builds its access log generator,
    # so replacing the class it will use here covers `daphne project.asgi:application`.
    cli = sys.modules.get("daphne.cli")
    if cli is not None:
        from daphne.access import AccessLogGenerator

        class ScrubbingAccessLogGenerator(AccessLogGenerator):  # type: ignore[misc]
            def write_entry(
                self, host: Any, date: Any, request: str, *args: Any, **kw: Any
            ) -> None:
                super().write_entry(host, date, scrub_query_secrets(request), *args, **kw)

        cli.AccessLogGenerator = ScrubbingAccessLogGenerator  # type: ignore[attr-defined]
