from django.apps import AppConfig


class MessengerConfig(AppConfig):
    name = "project.messenger"
    label = "messenger"
    verbose_name = "Messenger (host domain)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the deploy checks)
        from .services import revocation

        revocation.connect()
