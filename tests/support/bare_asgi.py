"""A host's ASGI module as docs/integration.md writes it: Django behind `with_hub`, and
nothing else (no call into the app's Daphne integration, no in-process dispatcher)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_application = get_asgi_application()

from messenger_realtime.asgi import with_hub  # noqa: E402

application = with_hub(django_application)
