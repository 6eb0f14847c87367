"""MediaJoinModel: short-lived media credentials, minted per recipient at delivery.

Never written to any table, queue or log: the outbox row names only the session; the hub
mints these for the user of the connection that forwards the invitation.

- accessToken: an HS256 JWT scoped to one room and one user (`room`, `sub`), short `exp`;
  never a wildcard room or subject.
- TURN credentials in the TURN REST scheme: username `<expiry-unix>:<userId>`,
  credential base64(HMAC-SHA1(TURN_SHARED_SECRET, username)), valid for TURN_TTL.
"""

import base64
import hashlib
import hmac
import time
from typing import Any
from uuid import UUID

import jwt
from django.core.exceptions import ImproperlyConfigured

from messenger_realtime.conf.settings import HubOptions


def turn_credentials(
    user_id: UUID, options: HubOptions, now: float | None = None
) -> dict[str, Any]:
    expires = int((now if now is not None else time.time()) + options.turn_ttl)
    username = f"{expires}:{user_id}"
    digest = hmac.new(options.turn_shared_secret.encode(), username.encode(), hashlib.sha1)
    return {
        "username": username,
        "credential": base64.b64encode(digest.digest()).decode(),
        "ttl": int(options.turn_ttl),
    }


def room_token(room_name: str, user_id: UUID, options: HubOptions, now: float | None = None) -> str:
    if not room_name or "*" in room_name:
        raise ValueError("a room token names exactly one room")
    issued = int(now if now is not None else time.time())
    claims = {
        "iss": options.media_jwt_issuer,
        "aud": options.media_jwt_audience,
        "sub": str(user_id),
        "room": room_name,
        "iat": issued,
        "nbf": issued,
        "exp": issued + int(options.media_token_ttl),
    }
    return jwt.encode(claims, options.media_jwt_signing_key, algorithm="HS256")


def media_join(room_name: str, user_id: UUID, options: HubOptions) -> dict[str, Any]:
    """The MediaJoinModel a client needs to join `room_name` as `user_id`.

    Raises ImproperlyConfigured rather than sign with an unset secret: the secrets may be
    left unset only by a host whose port reads no calls (system check E012 says so at
    `check`), and such a host has no call events to deliver."""
    if not options.media_jwt_signing_key or not options.turn_shared_secret:
        raise ImproperlyConfigured(
            "MESSENGER_REALTIME MEDIA_JWT_SIGNING_KEY and TURN_SHARED_SECRET must be set to"
            " deliver call events (system check messenger_realtime.E012)"
        )
    now = time.time()
    turn = turn_credentials(user_id, options, now)
    ice_servers: list[dict[str, Any]] = []
    stun = [url for url in options.ice_servers if url.startswith("stun:")]
    turn_urls = [url for url in options.ice_servers if url.startswith(("turn:", "turns:"))]
    if stun:
        ice_servers.append({"urls": stun})
    if turn_urls:
        ice_servers.append(
            {"urls": turn_urls, "username": turn["username"], "credential": turn["credential"]}
        )
    return {
        "roomName": room_name,
        "accessToken": room_token(room_name, user_id, options, now),
        "expiresAt": int(now + options.media_token_ttl),
        "iceServers": ice_servers,
        "turnTtl": turn["ttl"],
    }
