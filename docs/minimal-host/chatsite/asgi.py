"""The minimal host's ASGI module, served by Daphne."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
django_application = get_asgi_application()

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from messenger_realtime.asgi import with_hub  # noqa: E402

application = with_hub(ASGIStaticFilesHandler(django_application))
