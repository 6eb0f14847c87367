"""Vacuum the outbox often: every claim and every outcome leaves a dead row version.

A queue table churns: each event's row is updated twice (claim, outcome), and the claim
scans the Pending index from its start, walking past every dead entry not yet vacuumed.
PostgreSQL's default (vacuum after 20 % of the table is dead) lets that walk grow with the
retained Done rows until claims take hundreds of milliseconds; 2 % (at least 2,000 rows),
without cost-based throttling, keeps it short. See docs/performance.md.
"""

from django.db import migrations

TUNED = (
    "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 2000,"
    " autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05"
)
DEFAULTS = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
    " autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor"
)


class Migration(migrations.Migration):
    dependencies = [("messenger_realtime", "0002_permissions")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE messenger.realtime_outbox SET ({TUNED})",
            reverse_sql=f"ALTER TABLE messenger.realtime_outbox RESET ({DEFAULTS})",
        )
    ]
