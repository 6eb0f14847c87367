"""What messenger_realtime needs (docs/integration.md, step 3)."""

import os

ASGI_APPLICATION = "chatsite.asgi.application"

# The backplane between the worker and every Daphne process.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer",
        "CONFIG": {"hosts": [os.environ.get("CHATSITE_REDIS_URL", "redis://127.0.0.1:6379/0")]},
    }
}

MESSENGER_REALTIME = {
    "DOMAIN_PORT": "chat.realtime.ChatPort",
    "JWT_SIGNING_KEY": os.environ["CHATSITE_JWT_SIGNING_KEY"],  # 32 bytes or more
    # Where per-user rate limits and open-connection counts live: without it none holds.
    "RATE_LIMIT_REDIS_URL": os.environ.get("CHATSITE_REDIS_URL", "redis://127.0.0.1:6379/0"),
    # No calls here, so no MEDIA_JWT_SIGNING_KEY and no TURN_SHARED_SECRET.
}
