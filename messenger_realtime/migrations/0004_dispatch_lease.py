"""The single-runner lease: one row per LOCK_KEY, written only by the lock holder.

The advisory lock alone cannot tell a wedged leader (stopped, deadlocked, paused) from a
working one: its session stays connected, so the lock is held for ever. The holder
therefore proves it is alive by stamping heartbeat_at with the database clock at least
every LOCK_TTL/3; a standby that sees the stamp older than LOCK_TTL terminates the
holder's session (which frees the lock) and takes over (dispatch/lease.py). Kept out of
the Django models: only the worker reads or writes it, with its own SQL.
"""

from django.db import migrations

CREATE = """
CREATE TABLE messenger.realtime_dispatch_lease (
    lock_key varchar(200) PRIMARY KEY,
    holder_pid integer NOT NULL,
    holder varchar(255) NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
)
"""
COMMENTS = [
    "COMMENT ON TABLE messenger.realtime_dispatch_lease IS"
    " 'Single-runner lease of dispatch_realtime: the advisory lock holder and its heartbeat'",
    "COMMENT ON COLUMN messenger.realtime_dispatch_lease.holder_pid IS"
    " 'pg_backend_pid() of the session holding the advisory lock'",
    "COMMENT ON COLUMN messenger.realtime_dispatch_lease.holder IS"
    " 'host:pid of the worker process, for operators'",
]


class Migration(migrations.Migration):
    dependencies = [("messenger_realtime", "0003_outbox_autovacuum")]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql="DROP TABLE messenger.realtime_dispatch_lease"),
        *(migrations.RunSQL(sql, reverse_sql=migrations.RunSQL.noop) for sql in COMMENTS),
    ]
