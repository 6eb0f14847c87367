"""`python manage.py reap_calls [--timeout S] [--every S]`: the call-timeout reaper (CallMissed).

Once by default (cron); with --every it runs on its own schedule until SIGTERM/SIGINT, as
the `reaper` process of scripts/serve and compose.yaml does.
"""

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from project.messenger.services import reap_missed_calls

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Mark 1:1 calls ringing longer than --timeout seconds as Missed (CallMissed). Once, "
        "or with --every S every S seconds until SIGTERM/SIGINT (exit 0)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=45.0, help="ring timeout, seconds")
        parser.add_argument(
            "--every", type=float, default=0.0, help="run every S seconds until stopped"
        )
        parser.add_argument(
            "--heartbeat",
            type=Path,
            help="touch this file after every run (a container healthcheck reads its age)",
        )

    def handle(
        self, *args: Any, timeout: float, every: float, heartbeat: Path | None, **options: Any
    ) -> None:
        if timeout < 0:
            raise CommandError("--timeout must be >= 0 seconds")
        if every < 0:
            raise CommandError("--every must be >= 0 seconds")
        if not every:
            self.stdout.write(f"missed calls: {reap_missed_calls(timeout)}")
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        logger.info("call reaper running", extra={"action": "reap", "every": every})
        while not stop.is_set():
            started = time.monotonic()
            close_old_connections()  # a long-lived loop must not reuse a broken connection
            try:
                missed = reap_missed_calls(timeout)
            except Exception:  # the database may be away for a while: try again next time
                logger.exception("call reaper run failed", extra={"action": "reap"})
            else:
                if missed:
                    logger.info("missed calls", extra={"action": "reap", "missed": missed})
                if heartbeat is not None:
                    heartbeat.touch()
            stop.wait(max(0.0, every - (time.monotonic() - started)))
        logger.info("call reaper stopped", extra={"action": "reap"})
