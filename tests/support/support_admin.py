"""Set-up for support's admin tests: the support group and a large incident."""

import importlib
from types import SimpleNamespace

from django.apps import apps
from django.contrib.auth.models import Group
from django.db import connection

SUPPORT = "Realtime support"


def restore_support_group() -> Group:
    """Run migration 0004's function again (transactional tests flush the tables)."""
    migration = importlib.import_module("messenger_realtime.migrations.0006_realtime_support_group")
    migration.create_support_group(apps, SimpleNamespace(connection=connection))
    return Group.objects.get(name=SUPPORT)


def bulk_quarantined(n: int, error: str) -> None:
    """`n` Quarantined rows with one last_error, in one INSERT (an outage's aftermath)."""
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO messenger.realtime_outbox"
            " (id, kind, target_kind, chat_id, message_id, seq, status, attempts, last_error)"
            " SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', gen_random_uuid(),"
            " gen_random_uuid(), g, 'Quarantined', 8, %s FROM generate_series(1, %s) g",
            [error, n],
        )
