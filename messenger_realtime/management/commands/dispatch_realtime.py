"""`python manage.py dispatch_realtime`: run the realtime outbox dispatcher."""

import argparse
import asyncio
from typing import Any

from channels.layers import get_channel_layer
from django.core.checks import Tags
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)

from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.conf.checks import WORKER_TAG
from messenger_realtime.conf.declared import BY_NAME, WORKER, role_keys
from messenger_realtime.conf.settings import DEFAULTS, env_name, load_options
from messenger_realtime.dispatch.connections import dedicate_django_connection
from messenger_realtime.dispatch.runner import build_runner, run_until_stopped
from messenger_realtime.exceptions import DatabaseUnusable
from messenger_realtime.ops.health import serve
from messenger_realtime.ops.logging import ensure_handler


def settings_help() -> str:
    """The worker's settings with their environment names, defaults and what they do
    (conf/declared.py), for --help."""
    lines = []
    for key in sorted(role_keys(WORKER)):
        default = DEFAULTS[key]
        shown = default if default not in ("", []) else "(none)"
        unit = f" {BY_NAME[key].unit}" if BY_NAME[key].unit else ""
        lines.append(f"  {key:<27} env {env_name(key):<40} default {shown}{unit}")
        lines.append(f"      {BY_NAME[key].doc}")
    return "\n".join(lines)


EPILOG = f"""\
settings (settings.MESSENGER_REALTIME["KEY"], overridden by the environment; durations in
seconds; every one is validated and the worker refuses to start on a bad value):
{{settings}}
  plus DATABASE_URL (a direct PostgreSQL connection or a session-pooling PgBouncer) and
  REDIS_URL (the channel layer Daphne reads from), or CHANNEL_REDIS_URLS: several Redis
  servers, comma-separated, the same list as every Daphne process (the layer shards over
  them; a bad entry is check messenger_realtime.E024).

partitions (DISPATCH_PARTITIONS=K > 1, opt-in):
  K leaders, each for the chats and users whose target hashes to its partition, so
  per-chat order holds. Every worker runs a standby for each partition; a worker alone
  leads all K, several spread them, a dead leader's partition is taken over like the
  single runner's lease. All workers must run the same K (docs/dispatcher.md).

metrics and probes:
  GET /metrics, /health/live and /health/ready on port METRICS_PORT
  (env {env_name("METRICS_PORT")}, default {DEFAULTS["METRICS_PORT"]}; 0 turns it off).

signals:
  SIGTERM, SIGINT  stop between rows: finish the push in hand, give back the rows not
                   pushed, record outcomes, release the lock, exit 0.

exit codes:
  0  stopped by SIGTERM/SIGINT, or --once finished (also when another worker leads)
  1  refused to start (a bad setting, REALTIME_BACKPLANE_ENABLED=false, the metrics port
     in use), or --once failed (database unreachable)
  2  a bad command-line argument

docs: docs/dispatcher.md (how it works), docs/operations.md, docs/runbooks/realtime-dispatch.md
"""


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order, with the epilog's layout kept as written."""


class Command(BaseCommand):
    help = "Dispatch messenger.realtime_outbox rows to the hub (persist-then-push worker)."
    # The models and the worker's own settings only: a hub-only setting (say a short
    # TURN_SHARED_SECRET) must not stop the worker.
    requires_system_checks = [Tags.models, WORKER_TAG]

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("epilog", EPILOG.format(settings=settings_help()))
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Run one pass (plus retention) and exit."
        )
        parser.add_argument(
            "--no-lock",
            action="store_true",
            help="Skip the single-runner advisory lock (benchmarks and failover drills; "
            "FOR UPDATE SKIP LOCKED still keeps runners on disjoint rows). Runs one "
            "unpartitioned runner whatever DISPATCH_PARTITIONS says.",
        )

    def handle(self, *args: Any, once: bool = False, no_lock: bool = False, **kw: Any) -> None:
        # System checks already ran (requires_system_checks); this re-validates and
        # refuses to start on any invalid MESSENGER_REALTIME value.
        options = load_options()
        ensure_handler()  # its lines reach stderr under any host logging config
        if not options.realtime_backplane_enabled:
            raise CommandError(
                "REALTIME_BACKPLANE_ENABLED is false: the in-memory channel layer cannot "
                "reach Daphne from another process, so the dispatcher runs inside Daphne "
                "(single-process mode). Enable the backplane to run this worker."
            )
        dedicate_django_connection(statement_timeout=options.build_timeout)
        asyncio.run(self._run(options, once=once, use_lock=not no_lock))

    async def _run(self, options: Any, *, once: bool, use_lock: bool) -> None:
        publisher = ChannelLayerPublisher(get_channel_layer())
        dispatcher = build_runner(options, publisher, use_lock=use_lock)
        port, host = options.metrics_port, options.metrics_host
        try:
            server = serve(dispatcher.liveness, port, host) if port else None
        except OSError as exc:
            raise CommandError(
                f"cannot serve /metrics on {host}:{port} ({exc.strerror}): set "
                f"${env_name('METRICS_PORT')} to a free port (0 turns it off), or "
                f"${env_name('METRICS_HOST')}"
            ) from exc
        try:
            # SIGTERM/SIGINT stop it between rows; it logs one line saying why it stopped.
            await run_until_stopped(dispatcher, once=once)
        except DatabaseUnusable as exc:
            raise CommandError(f"cannot use the database (DATABASE_URL): {exc}") from exc
        finally:
            if server is not None:
                server.shutdown()
