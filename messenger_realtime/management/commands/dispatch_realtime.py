"""`python manage.py dispatch_realtime`: run the realtime outbox dispatcher."""

import asyncio
import signal
from typing import Any

from channels.layers import get_channel_layer
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from messenger_realtime.conf.checks import WORKER_TAG
from messenger_realtime.conf.settings import load_options
from messenger_realtime.dispatch.connections import dedicate_django_connection
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.ops.health import serve
from messenger_realtime.transport.publisher import ChannelLayerPublisher


class Command(BaseCommand):
    help = "Dispatch messenger.realtime_outbox rows to the hub (persist-then-push worker)."
    # The models and the worker's own settings only: a hub-only setting (say a short
    # TURN_SHARED_SECRET) must not stop the worker.
    requires_system_checks = [Tags.models, WORKER_TAG]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Run one pass (plus retention) and exit."
        )
        parser.add_argument(
            "--no-lock",
            action="store_true",
            help="Skip the single-runner advisory lock (benchmarks and failover drills; "
            "FOR UPDATE SKIP LOCKED still keeps runners on disjoint rows).",
        )

    def handle(self, *args: Any, once: bool = False, no_lock: bool = False, **kw: Any) -> None:
        # System checks already ran (requires_system_checks); this re-validates and
        # refuses to start on any invalid MESSENGER_REALTIME value.
        options = load_options()
        if not options.realtime_backplane_enabled:
            raise CommandError(
                "REALTIME_BACKPLANE_ENABLED is false: the in-memory channel layer cannot "
                "reach Daphne from another process, so the dispatcher runs inside Daphne "
                "(single-process mode). Enable the backplane to run this worker."
            )
        dedicate_django_connection()
        asyncio.run(self._run(options, once=once, use_lock=not no_lock))

    async def _run(self, options: Any, *, once: bool, use_lock: bool) -> None:
        publisher = ChannelLayerPublisher(get_channel_layer())
        dispatcher = Dispatcher(options, publisher, use_lock=use_lock)
        try:
            server = (
                serve(dispatcher.liveness, options.metrics_port) if options.metrics_port else None
            )
        except OSError as exc:
            raise CommandError(
                f"cannot serve /metrics on METRICS_PORT {options.metrics_port}: {exc.strerror}"
            ) from exc
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Stop between rows: finish the row in hand, record outcomes, release the lock.
            loop.add_signal_handler(sig, dispatcher.stop.set)
        try:
            await dispatcher.run(once=once)
        finally:
            if server is not None:
                server.shutdown()
