"""Participant.took_part: presence by consent. Members who already took part in a chat
before this field existed are marked: those who sent a message in it, and its creator
(the actor of its ChatCreated event)."""

from django.db import migrations, models

MARK_WHO_TOOK_PART = (
    "UPDATE messenger_participant p SET took_part = true"
    " WHERE EXISTS (SELECT 1 FROM messenger_message m"
    " WHERE m.chat_id = p.chat_id AND m.sender_id = p.user_id)"
    " OR EXISTS (SELECT 1 FROM messenger_chatevent e WHERE e.chat_id = p.chat_id"
    " AND e.kind = 'ChatCreated' AND e.actor_id = p.user_id)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("messenger", "0006_user_last_seen_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="participant",
            name="took_part",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunSQL(MARK_WHO_TOOK_PART, migrations.RunSQL.noop),
    ]
