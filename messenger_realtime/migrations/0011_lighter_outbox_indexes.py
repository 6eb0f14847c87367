"""Fewer index entries per message (issue 49; docs/performance.md, "Half the database's
work per message").

- ix_rto_due keeps the spec's columns (status, next_attempt_at) but lists Pending and
  Quarantined rows only: the Done rows (most of the table, a day of them) are read through
  it by nothing, and the Done outcome no longer adds an entry to it.
- ix_rto_pending_partition (migration 0007: an md5 expression over every Pending row,
  computed at each insert and each claim) serves only partitioned runners
  (DISPATCH_PARTITIONS > 1), so it is dropped here unless a partitioned runner has a
  lease row; a partitioned runner creates it when it starts (store.ensure_partition_index,
  CREATE INDEX CONCURRENTLY) and claims correctly, only slower, until it is there.

Both run CONCURRENTLY (this migration is not atomic), so the outbox takes writes while
they build: no owner transaction waits on it, and no row is touched. Between the old
ix_rto_due's drop and the new one's build, the one reader of it (the Quarantined gauge,
once per STATS_INTERVAL) reads the table instead. Reversible: the reverse builds the full
ix_rto_due again and ix_rto_pending_partition as migration 0007 did (IF NOT EXISTS). A
CONCURRENTLY build that fails leaves an invalid index behind: drop it (DROP INDEX
CONCURRENTLY, in the messenger schema) and migrate again.
"""

from typing import Any

from django.db import migrations, models

# Spelled out (Django's index operations would drop an unqualified "ix_rto_due", which
# is not on the search path: the outbox lives in the messenger schema).
DUE_DROP = "DROP INDEX CONCURRENTLY IF EXISTS messenger.ix_rto_due"
DUE_FULL = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_rto_due"
    " ON messenger.realtime_outbox (status, next_attempt_at)"
)
DUE_LIVE = DUE_FULL + " WHERE status IN ('Pending', 'Quarantined')"
PARTITION_INDEX = "messenger.ix_rto_pending_partition"
# A lease row of a partitioned runner, fresh or not: partitions are (or were) in use here.
PARTITIONED_LEASE = """
SELECT EXISTS (SELECT FROM messenger.realtime_dispatch_lease
               WHERE coalesce(partitions, 1) > 1 OR lock_key LIKE '%#partition-%')
"""
# Migration 0007's index, for the reverse.
PARTITION_INDEX_CREATE = """
CREATE INDEX IF NOT EXISTS ix_rto_pending_partition ON messenger.realtime_outbox
    ((('x' || left(md5((target_key)::text), 8))::bit(32)::int4), target_key, id)
    WHERE status = 'Pending'
"""


def drop_partition_index(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cur:
        cur.execute(PARTITIONED_LEASE)
        (partitioned,) = cur.fetchone()
        if not partitioned:
            cur.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {PARTITION_INDEX}")


def create_partition_index(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cur:
        cur.execute(PARTITION_INDEX_CREATE)


class Migration(migrations.Migration):
    atomic = False  # CONCURRENTLY cannot run inside a transaction

    dependencies = [("messenger_realtime", "0010_streams")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(DUE_DROP, DUE_FULL),
                migrations.RunSQL(DUE_LIVE, DUE_DROP),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="realtimeoutboxentry", name="ix_rto_due"),
                migrations.AddIndex(
                    model_name="realtimeoutboxentry",
                    index=models.Index(
                        condition=models.Q(("status__in", ["Pending", "Quarantined"])),
                        fields=["status", "next_attempt_at"],
                        name="ix_rto_due",
                    ),
                ),
            ],
        ),
        migrations.RunPython(drop_partition_index, create_partition_index),
    ]
