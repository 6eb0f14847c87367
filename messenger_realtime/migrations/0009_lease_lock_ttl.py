"""The LOCK_TTL of each dispatch lease's holder.

A standby judged the holder's heartbeat against its *own* LOCK_TTL: with the setting
mismatched between workers, one with a short TTL took the lease of a live leader whose
longer TTL has it stamp less often. The holder now writes its LOCK_TTL into its lease
row, and every worker judges the lease by that (dispatch/lease.py). NULL: a row written
by a worker from before this migration (judged by the reader's own LOCK_TTL, as before).
Adding a nullable column without a default rewrites nothing.
"""

from django.db import migrations

ADD = "ALTER TABLE messenger.realtime_dispatch_lease ADD COLUMN IF NOT EXISTS lock_ttl float8"
COMMENT = (
    "COMMENT ON COLUMN messenger.realtime_dispatch_lease.lock_ttl IS"
    " 'LOCK_TTL (seconds) of the holder: the lease is stale once heartbeat_at is older;"
    " NULL: a worker before 0009'"
)
DROP = "ALTER TABLE messenger.realtime_dispatch_lease DROP COLUMN IF EXISTS lock_ttl"


class Migration(migrations.Migration):
    dependencies = [("messenger_realtime", "0008_lease_partitions")]

    operations = [
        migrations.RunSQL(ADD, DROP),
        migrations.RunSQL(COMMENT, migrations.RunSQL.noop),
    ]
