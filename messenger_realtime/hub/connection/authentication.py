"""What a connection authenticated with, and until when it holds.

A part of HubConnection. The credentials are checked once, at the upgrade
(credentials/request.py); from then on a connection holds them until they expire (the
token's `exp`, the Django session's expiry): nothing is forwarded from that moment and
the connection is closed with allowReconnect. A Django session can end earlier (a
logout): the connection hears it through its user group (layer_messages.py) and checks here
whether the session still holds. A stateful resume authenticates again and renews them,
and so does a client's `RenewToken` (methods/renew_token.py) without reconnecting.
"""

import asyncio
import hashlib
import time
from uuid import UUID

from messenger_realtime.hub.credentials.sessions import session_holds
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.reads import hub_read

_session_holds = hub_read(session_holds)
SESSION_ENDED = "session ended (logout)"
REVOKED = "credentials revoked"
# Tokens a connection remembers having taken (digests): the one it opened with, which
# the official clients keep sending on long polling and Server-Sent Events, and the
# latest renewals'.
REMEMBERED_TOKENS = 4


def token_digest(token: str) -> bytes:
    """What a connection keeps of a token it took: never the token itself."""
    return hashlib.sha256(token.encode()).digest()


class Authentication:
    """A connection's credentials: their expiry on the loop's clock, and its session."""

    __slots__ = (
        "expires_at",
        "expiry_reason",
        "first_token",
        "issued_at",
        "session",
        "session_key",
        "tokens",
    )

    def __init__(
        self, identity: Identity, token: str | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        # Digests of the tokens it took: the first, and the latest renewals' (a tuple,
        # empty until a renewal: no per-connection container for the many never renewed).
        self.first_token = token_digest(token) if token else None
        self.tokens: tuple[bytes, ...] = ()
        self.renew(identity, token, loop)

    def holds(self, now: float) -> bool:
        """Whether its credentials still hold at `now` (the loop's clock): the expiry rule,
        decided here only (ending.expired says how an expired connection ends)."""
        return now < self.expires_at

    def took_token(self, token: str) -> bool:
        """Whether this connection took `token` (at its opening, a resume or a renewal):
        a request of its long polling or event stream may then present it past its own
        expiry, until the connection's (transports/http.py, `_renewed`)."""
        digest = token_digest(token)
        return digest == self.first_token or digest in self.tokens

    def renew(self, identity: Identity, token: str | None, loop: asyncio.AbstractEventLoop) -> None:
        """Take these credentials (at the upgrade, or a resume's). The token itself is
        not kept: only when it expires, and its digest."""
        if token and self.first_token is not None:
            digest = token_digest(token)
            if digest != self.first_token and digest not in self.tokens:
                self.tokens = (*self.tokens[1 - REMEMBERED_TOKENS :], digest)
        self.session = identity.session  # the digest of its Django session, if any
        self.session_key = identity.session_key  # that session's key: never logged or sent
        self.issued_at = identity.issued_at  # the token's `iat`: a renewal's may not be older
        if identity.expires_at is None:
            self.expires_at, self.expiry_reason = float("inf"), "session expired"
        else:
            # Loop time when they expire: the loop's clock is what the deadlines use.
            self.expires_at = loop.time() + identity.expires_at - time.time()
            self.expiry_reason = "token expired" if token else "session expired"

    async def session_holds(self, user_id: UUID) -> bool:
        """Whether the Django session it came with (if any) still exists and is still
        its user's."""
        key = self.session_key
        return key is None or await _session_holds(key, user_id)
