"""The "Realtime support" group: exactly the permissions support's outbox workflow needs
(see the rows, requeue Quarantined rows, quarantine Pending rows). Add support staff to it
in the admin (Users -> the user -> Groups; they also need "Staff status")."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

SUPPORT_GROUP = "Realtime support"
SUPPORT_PERMISSIONS = [
    "view_realtimeoutboxentry",
    "requeue_realtimeoutboxentry",
    "quarantine_realtimeoutboxentry",
]


def create_support_group(apps, schema_editor):
    db = schema_editor.connection.alias
    # Permissions are normally made after all migrations (post_migrate); make this app's
    # now, so the group can be given them on a fresh database.
    app_config = apps.get_app_config("messenger_realtime")
    models_module = getattr(app_config, "models_module", None)  # unset in historical apps
    app_config.models_module = models_module or True
    try:
        create_permissions(app_config, apps=apps, verbosity=0, using=db)
    finally:
        app_config.models_module = models_module
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    permissions = list(
        Permission.objects.using(db).filter(
            content_type__app_label="messenger_realtime", codename__in=SUPPORT_PERMISSIONS
        )
    )
    assert len(permissions) == len(SUPPORT_PERMISSIONS), permissions
    group, _ = Group.objects.using(db).get_or_create(name=SUPPORT_GROUP)
    group.permissions.set(permissions)


def remove_support_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.using(schema_editor.connection.alias).filter(name=SUPPORT_GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("messenger_realtime", "0005_fair_claims_and_suspects"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_support_group, remove_support_group)]
