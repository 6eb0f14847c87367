from django.apps import AppConfig
from django.core.signals import setting_changed


class MessengerRealtimeConfig(AppConfig):
    name = "messenger_realtime"
    verbose_name = "Messenger realtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from messenger_realtime.conf import checks  # noqa: F401  (registers the system checks)
        from messenger_realtime.conf.settings import clear_cache
        from messenger_realtime.contracts import checks as port_checks  # noqa: F401
        from messenger_realtime.hub import checks as hub_checks  # noqa: F401
        from messenger_realtime.outbox import checks as outbox_checks  # noqa: F401
        from messenger_realtime.outbox.intents import unbuildable_kinds

        def forget_options(setting: str, **kwargs: object) -> None:
            if setting in ("MESSENGER_REALTIME", "CHANNEL_LAYERS"):
                clear_cache()
                unbuildable_kinds.cache_clear()

        setting_changed.connect(forget_options, weak=False, dispatch_uid="messenger_realtime")
        # A logout closes the hub connections its session opened (backplane/control.py).
        from django.contrib.auth.signals import user_logged_out

        from messenger_realtime.backplane.control import on_user_logged_out

        user_logged_out.connect(on_user_logged_out, dispatch_uid="messenger_realtime.logout")
