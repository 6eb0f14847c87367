"""The partition count (DISPATCH_PARTITIONS) of each dispatch lease.

Partition leases of different counts have different LOCK_KEYs (LOCK_KEY#partition-i-of-K),
so their advisory locks never meet: without this column a worker started with another
count (a rolling change of the setting) would lead beside a live leader, and one chat
would have two leaders. With it, a worker refuses to lead while a live lease of its
LOCK_KEY names another count (dispatch/queries.sql, LEASE_OTHER_COUNT). NULL: a row written by a
worker from before this migration (its LOCK_KEY says the count). Adding a nullable column
without a default rewrites nothing.
"""

from django.db import migrations

ADD = "ALTER TABLE messenger.realtime_dispatch_lease ADD COLUMN IF NOT EXISTS partitions integer"
COMMENT = (
    "COMMENT ON COLUMN messenger.realtime_dispatch_lease.partitions IS"
    " 'DISPATCH_PARTITIONS of the holder (1: the single runner); NULL: a worker before 0008'"
)
DROP = "ALTER TABLE messenger.realtime_dispatch_lease DROP COLUMN IF EXISTS partitions"


class Migration(migrations.Migration):
    dependencies = [("messenger_realtime", "0007_partition_index")]

    operations = [
        migrations.RunSQL(ADD, DROP),
        migrations.RunSQL(COMMENT, migrations.RunSQL.noop),
    ]
