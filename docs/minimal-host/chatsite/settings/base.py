"""Django's own settings, as `startproject` writes them, on PostgreSQL (with the pool
that docs/integration.md, step 3, asks for)."""

import os
from pathlib import Path

from messenger_realtime.hub.bounded_pool import BoundedConnection

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SECRET_KEY = os.environ["CHATSITE_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "daphne",  # before staticfiles: `runserver` serves ASGI
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "messenger_realtime",
    "chat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "chatsite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_USER_MODEL = "chat.User"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["CHATSITE_DB_NAME"],
        "HOST": os.environ.get("CHATSITE_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("CHATSITE_DB_PORT", "5432"),
        "USER": os.environ.get("CHATSITE_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("CHATSITE_DB_PASSWORD", ""),
        # A pool whose every reply comes within NETWORK_TIMEOUT: a silent flow fails one
        # request, not every request after it.
        "OPTIONS": {"pool": {"connection_class": BoundedConnection}},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_TZ = True
STATIC_URL = "static/"
