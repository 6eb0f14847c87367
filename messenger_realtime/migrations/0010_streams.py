"""Streams for recovery: a counter per hub group and each outbox row's offset in it.

messenger.realtime_stream holds one row per stream (`chat:{ChatId}`, `user:{UserId}`)
with its last offset; enqueue takes the next offsets from it in the owner's transaction
(outbox/streams.py). Each outbox row gets its offset (NULL for rows written before this
migration: they are never recovered), and a unique partial index serves "stream X after
offset N" (hub/recovery.py). Adding a nullable column rewrites nothing; the index only
lists rows with an offset, so it is empty when built. On a large production outbox,
build it by hand first with CREATE UNIQUE INDEX CONCURRENTLY under the same name, and
this migration then does nothing for it.
"""

from django.db import migrations, models

CREATE_STREAMS = """
CREATE TABLE IF NOT EXISTS messenger.realtime_stream (
    stream text PRIMARY KEY,
    last_offset bigint NOT NULL CHECK (last_offset >= 0)
)
"""
COMMENT_STREAMS = (
    "COMMENT ON TABLE messenger.realtime_stream IS"
    " 'The last offset taken on each stream (chat:{ChatId}, user:{UserId}):"
    " enqueue takes the next ones in the owner''s transaction'"
)
DROP_STREAMS = "DROP TABLE IF EXISTS messenger.realtime_stream"

CREATE_INDEX = """
CREATE UNIQUE INDEX IF NOT EXISTS ux_rto_stream ON messenger.realtime_outbox
    (target_key, target_kind, stream_offset) WHERE stream_offset IS NOT NULL
"""
DROP_INDEX = "DROP INDEX IF EXISTS messenger.ux_rto_stream"


class Migration(migrations.Migration):
    dependencies = [("messenger_realtime", "0009_lease_lock_ttl")]

    operations = [
        migrations.RunSQL(CREATE_STREAMS, DROP_STREAMS),
        migrations.RunSQL(COMMENT_STREAMS, migrations.RunSQL.noop),
        migrations.AddField(
            model_name="realtimeoutboxentry",
            name="stream_offset",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CREATE_INDEX, DROP_INDEX)],
            state_operations=[
                migrations.AddConstraint(
                    model_name="realtimeoutboxentry",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(stream_offset__isnull=False),
                        fields=("target_key", "target_kind", "stream_offset"),
                        name="ux_rto_stream",
                    ),
                ),
            ],
        ),
    ]
