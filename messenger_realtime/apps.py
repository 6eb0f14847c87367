from django.apps import AppConfig


class MessengerRealtimeConfig(AppConfig):
    name = "messenger_realtime"
    verbose_name = "Messenger realtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from messenger_realtime.conf import checks  # noqa: F401  (registers the system checks)
