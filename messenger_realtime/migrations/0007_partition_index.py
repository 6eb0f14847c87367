"""The index partitioned runners walk (DISPATCH_PARTITIONS > 1, dispatch/partitions.py).

An expression index on Pending rows, (target_hash, target_key, id), where target_hash is
the first 32 bits of md5(target_key::text): a partition is a range of target_hash, so the
walk over one partition's targets is a loose index scan. No column is added (no table
rewrite); on a large production outbox, build it by hand first with CREATE INDEX
CONCURRENTLY under the same name, and this migration then does nothing.
The expression must stay textually equal to partitions.target_hash("target_key").
"""

from django.db import migrations

TARGET_HASH = "('x' || left(md5((target_key)::text), 8))::bit(32)::int4"

CREATE = f"""
CREATE INDEX IF NOT EXISTS ix_rto_pending_partition ON messenger.realtime_outbox
    (({TARGET_HASH}), target_key, id) WHERE status = 'Pending'
"""
DROP = "DROP INDEX IF EXISTS messenger.ix_rto_pending_partition"


class Migration(migrations.Migration):
    dependencies = [
        ("messenger_realtime", "0006_realtime_support_group"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
