"""Settings for the messenger realtime project.

Everything that differs between machines comes from the environment (django-environ);
the defaults are the embedded local setup that `scripts/serve` and `scripts/test` provide.
"""

from pathlib import Path

import environ

from messenger_realtime.conf.layer_hosts import split_urls
from messenger_realtime.conf.numbers import env_number
from messenger_realtime.hub.bounded_pool import BoundedConnection
from project.devkeys import dev_keys

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)
_dev_keys: dict[str, str] = {}
_SECRETS = ("DJANGO_SECRET_KEY", "JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET")
if not all(env.str(name, default="") for name in _SECRETS):
    _dev_keys = dev_keys(BASE_DIR / ".local")  # random per checkout; see project/devkeys.py
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or _dev_keys["secret_key"]
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_prometheus",
    "messenger_realtime",
    "project.messenger",
]

AUTH_USER_MODEL = "messenger.User"

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

# Daphne runs each request's sync code on a thread of its own, so a connection kept per
# thread (CONN_MAX_AGE > 0) grows with the concurrency until PostgreSQL refuses clients.
# Each process instead borrows from a psycopg pool of at most DATABASE_POOL_MAX_SIZE
# connections (a request waits up to DATABASE_POOL_TIMEOUT seconds for one, then fails).
# DATABASE_POOL_MAX_SIZE=0 turns the pool off (behind PgBouncer): a connection per request,
# or kept DATABASE_CONN_MAX_AGE seconds. The dispatch worker opts out of the pool and keeps
# one persistent connection for its domain reads (dispatch/connections.py).
# Numbers are parsed exactly or refused naming the variable (env_number: django-environ's
# int() read "1e12" as 112); the bounds only catch nonsense (a pool of a million).
_POOL_MAX_SIZE = int(env_number("DATABASE_POOL_MAX_SIZE", int, 10, 0, 1000))
if _POOL_MAX_SIZE == 1:  # the hub's reads keep one pooled connection per process
    raise ValueError(
        "$DATABASE_POOL_MAX_SIZE: 1 leaves no pooled connection beside the one the hub's"
        " reads keep (messenger_realtime/hub/reads.py): set 2 or more, or 0 for no pool"
    )
_DATABASE_OPTIONS: dict[str, object] = {
    "application_name": env.str("DATABASE_APPLICATION_NAME", default="messenger-web"),
}
if _POOL_MAX_SIZE > 0:
    _DATABASE_OPTIONS["pool"] = {
        # Every reply within NETWORK_TIMEOUT: a silent flow fails one request and the pool
        # replaces the connection, instead of holding a thread and a connection for ever.
        "connection_class": BoundedConnection,
        "min_size": min(int(env_number("DATABASE_POOL_MIN_SIZE", int, 1, 0, 1000)), _POOL_MAX_SIZE),
        "max_size": _POOL_MAX_SIZE,
        "timeout": env_number("DATABASE_POOL_TIMEOUT", float, 10.0, 0.001, 600),
    }
_database = env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/messenger")
DATABASES = {
    "default": {
        **_database,
        "OPTIONS": {**_database.get("OPTIONS", {}), **_DATABASE_OPTIONS},
        # A pool needs 0 (Django returns the connection to it after each request).
        "CONN_MAX_AGE": 0
        if _POOL_MAX_SIZE > 0
        else int(env_number("DATABASE_CONN_MAX_AGE", int, 0, 0, 86400)),
        "CONN_HEALTH_CHECKS": True,
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# No pool on purpose (DATABASE_POOL_MAX_SIZE=0: behind PgBouncer, or a management command,
# which manage.py runs without one): the app's warning about a missing pool is answered.
SILENCED_SYSTEM_CHECKS = ["messenger_realtime.W005"] if _POOL_MAX_SIZE == 0 else []

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
# The channel layer's Redis servers, comma-separated (default: REDIS_URL alone). With
# several, channels-redis shards groups and Daphne process queues over them by consistent
# hashing (docs/operations.md, "Sharded Redis"); the list's order is the hash ring, so
# every process must be given the same list. An entry may be a redis+sentinel:// URL
# (messenger_realtime/backplane/sentinel.py): a master found through Sentinels, followed
# across a failover (docs/operations.md, "Failover"). Kept as written: a bad entry (an empty one
# included) is named by system check messenger_realtime.E024, not silently dropped.
CHANNEL_REDIS_URLS = split_urls(env.str("CHANNEL_REDIS_URLS", default=REDIS_URL))

# The realtime dispatcher (messenger_realtime.conf.settings reads this and the
# MESSENGER_REALTIME_<KEY> / REALTIME_BACKPLANE_ENABLED environment overrides).
MESSENGER_REALTIME: dict[str, object] = {
    "DOMAIN_PORT": "project.messenger.realtime_port.HostDomainPort",
    "JWT_SIGNING_KEY": env.str("JWT_SIGNING_KEY", default="") or _dev_keys["jwt_signing_key"],
    "MEDIA_JWT_SIGNING_KEY": env.str("MEDIA_JWT_SIGNING_KEY", default="")
    or _dev_keys["media_jwt_signing_key"],
    "TURN_SHARED_SECRET": env.str("TURN_SHARED_SECRET", default="")
    or _dev_keys["turn_shared_secret"],
    # Rate limit counters beside the channel layer (docs/hub.md, "Rate limits").
    "RATE_LIMIT_REDIS_URL": REDIS_URL,
}

# channels-redis is the backplane between the worker and every Daphne process.
# Without it (REALTIME_BACKPLANE_ENABLED=false) only one process can deliver.
if env.bool("REALTIME_BACKPLANE_ENABLED", default=True):
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis' core layer, receiving a process's messages in batches
            "BACKEND": "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer",
            "CONFIG": {
                # The layer bounds every connection itself (socket timeout, keepalives,
                # TCP_USER_TIMEOUT: MESSENGER_REALTIME NETWORK_TIMEOUT, whatever is set
                # here; docs/reliability.md); connecting to a dead Redis fails fast.
                "hosts": [
                    {"address": url, "socket_connect_timeout": 5} for url in CHANNEL_REDIS_URLS
                ],
                # The queue of one Daphne process: channels-redis keeps every connection
                # of a process in one Redis key, so this bounds the whole process'
                # backlog. Beyond it channels-redis drops (the worker counts overruns);
                # leave room for bursts, so a burst is queued rather than lost.
                "capacity": int(env_number("CHANNEL_CAPACITY", int, 10_000, 1, 10_000_000)),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# collectstatic's output: the image collects into /app/static and the proxy serves it.
STATIC_ROOT = Path(env.str("DJANGO_STATIC_ROOT", default=str(BASE_DIR / ".local" / "static")))
# The official SignalR browser build, from npm (package.json), never copied into the repo.
_SIGNALR_BROWSER = BASE_DIR / "node_modules" / "@microsoft" / "signalr" / "dist" / "browser"
STATICFILES_DIRS = [("vendor/signalr", _SIGNALR_BROWSER)] if _SIGNALR_BROWSER.is_dir() else []

# Behind the TLS-terminating reverse proxy (ops/nginx/, compose.yaml), from the environment;
# the defaults suit plain-HTTP local runs. `manage.py check --deploy` is clean with the
# production values (docs/operations.md "Deploying"; tests/unit/test_deploy_settings.py).
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
if env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", default=False):
    # The proxy sets X-Forwarded-Proto and strips any the client sent (ops/nginx/).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
# Probes and Prometheus reach Daphne directly over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^health/", r"^metrics$"]
SECURE_HSTS_SECONDS = int(env_number("DJANGO_SECURE_HSTS_SECONDS", int, 0, 0, 63_072_000))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=False)

# The demo chat page (/demo/): password-less sign-in as demo users. Never in production.
DEMO_ENABLED = env.bool("DEMO_ENABLED", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "kv": {"()": "messenger_realtime.ops.logging.KeyValueFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "kv"},
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
