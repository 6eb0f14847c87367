"""One live contact or request per pair (issue: concurrent requests made up to ten).

Before the constraint, the duplicates that check-then-insert let through are set aside:
of each pair's live rows the first (by created_at, then id) stays, the others become
Removed. Their notifications were already sent; nothing is deleted.
"""

import django.db.models.functions.comparison
from django.db import migrations, models

SET_ASIDE_DUPLICATES = """
UPDATE messenger_contact AS c SET status = 'Removed', updated_at = now()
FROM (
    SELECT id, row_number() OVER (
        PARTITION BY least(requester_id, addressee_id), greatest(requester_id, addressee_id)
        ORDER BY created_at, id
    ) AS n
    FROM messenger_contact WHERE status IN ('Pending', 'Accepted')
) AS ranked
WHERE c.id = ranked.id AND ranked.n > 1
"""


class Migration(migrations.Migration):
    dependencies = [
        ("messenger", "0002_chat_membership_version"),
    ]

    operations = [
        migrations.RunSQL(SET_ASIDE_DUPLICATES, reverse_sql=migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="contact",
            constraint=models.UniqueConstraint(
                django.db.models.functions.comparison.Least("requester", "addressee"),
                django.db.models.functions.comparison.Greatest("requester", "addressee"),
                condition=models.Q(("status__in", ["Pending", "Accepted"])),
                name="uq_contact_live_pair",
            ),
        ),
    ]
