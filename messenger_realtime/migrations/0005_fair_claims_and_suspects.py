"""Isolation columns and indexes (docs/dispatcher.md, Isolation).

claimed_at marks an attempt in flight until its outcome (a due row that still has it is a
suspect, retried alone); target_key is the hub target fair claims take turns over, a
stored generated column (adding it rewrites the table: on a large production outbox, run
it in a quiet window, or add it after retention has shrunk the table); three partial
indexes on Pending rows serve the walk over targets, urgent kinds and suspects.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("messenger_realtime", "0004_dispatch_lease"),
    ]

    operations = [
        migrations.AddField(
            model_name="realtimeoutboxentry",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="realtimeoutboxentry",
            name="target_key",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(target_kind="User", then=models.F("target_user_id")),
                    default=models.F("chat_id"),
                ),
                output_field=models.UUIDField(),
            ),
        ),
        migrations.AddIndex(
            model_name="realtimeoutboxentry",
            index=models.Index(
                condition=models.Q(("status", "Pending")),
                fields=["target_key", "id"],
                name="ix_rto_pending_target",
            ),
        ),
        migrations.AddIndex(
            model_name="realtimeoutboxentry",
            index=models.Index(
                condition=models.Q(
                    (
                        "kind__in",
                        (
                            "CallInvited",
                            "CallCancelled",
                            "CallMissed",
                            "CallEnded",
                            "CallDeclined",
                            "CallAnswered",
                            "ConferenceInvited",
                            "ConferenceStarted",
                            "ConferenceEnded",
                        ),
                    ),
                    ("status", "Pending"),
                ),
                fields=["id"],
                name="ix_rto_pending_urgent",
            ),
        ),
        migrations.AddIndex(
            model_name="realtimeoutboxentry",
            index=models.Index(
                condition=models.Q(("claimed_at__isnull", False), ("status", "Pending")),
                fields=["id"],
                name="ix_rto_pending_claimed",
            ),
        ),
    ]
