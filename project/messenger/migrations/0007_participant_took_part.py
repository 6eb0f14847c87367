"""Participant.took_part: presence by consent. Members who already sent a message in a
chat took part in it; who created a chat is not recorded for older chats, so its
creator takes part again with their next message."""

from django.db import migrations, models

MARK_SENDERS = (
    "UPDATE messenger_participant p SET took_part = true"
    " WHERE EXISTS (SELECT 1 FROM messenger_message m"
    " WHERE m.chat_id = p.chat_id AND m.sender_id = p.user_id)"
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
        migrations.RunSQL(MARK_SENDERS, migrations.RunSQL.noop),
    ]
