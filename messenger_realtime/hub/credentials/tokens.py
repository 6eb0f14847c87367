"""Tokens, and who the credentials say the caller is: JWT access tokens (minted,
verified, read from a request), negotiate's connection tokens, and identify() (a token or
a Django session's user -> an Identity, checked against the user's standing)."""

import collections
import contextlib
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

import jwt
from django.core import signing

from messenger_realtime.backplane.control import session_digest
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.contracts.port import UserStanding, get_domain_port
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.credentials.sessions import session_expiry
from messenger_realtime.uuid7 import uuid7

_CONNECTION_SALT = "messenger_realtime.hub.connection"


def mint_access_token(user_id: UUID, options: HubOptions, lifetime: float | None = None) -> str:
    """An HS256 JWT for a user (the `realtime_token` command and tests). `iat` to the
    microsecond, as the revocation stamp it is compared with: a token minted just after
    a revocation is not mistaken for one from before it, nor the reverse (milliseconds
    rounded up let a token minted half a millisecond before a revocation outlive it)."""
    now = time.time()
    claims = {
        "sub": str(user_id),
        "iss": options.jwt_issuer,
        "aud": options.jwt_audience,
        "iat": round(now, 6),
        "exp": int(now) + int(lifetime if lifetime is not None else options.jwt_lifetime),
    }
    return jwt.encode(claims, options.jwt_signing_key, algorithm="HS256")


@dataclass(frozen=True)
class Identity:
    """Who a connection or request is, and until when its credentials hold (unix time;
    None when they do not expire on their own)."""

    user_id: UUID
    expires_at: float | None
    # For a Django session: a digest of its key (session_digest), so that the user's
    # logout can close this connection; the key itself stays in this process (the
    # handshake re-reads the session by it: session_holds) and out of every log.
    session: str | None = None
    session_key: str | None = field(default=None, repr=False)
    # When the credentials were issued (a token's `iat`), for revocation; None: unknown
    # (a session, which revocation ends through its auth hash instead).
    issued_at: float | None = None


# Tokens whose signature and claims were checked, with what they said: a client
# presents its token at negotiate and again at the upgrade (and again at every reconnect),
# and PyJWT's HS256 check re-examines the key (PEM, SSH and JWK shapes) on every call,
# most of a verification's cost. Keyed by the token and the options that verified it;
# the expiry is checked on every use. Bounded, oldest out first; failures are not kept.
VERIFIED_TOKENS = 8192
_verified: "collections.OrderedDict[tuple[str, str, str, str], Identity]" = (
    collections.OrderedDict()
)


def read_access_token(token: str, options: HubOptions) -> Identity:
    """The user id and expiry (`exp`) of a valid token; InvalidToken otherwise."""
    key = (token, options.jwt_signing_key, options.jwt_issuer, options.jwt_audience)
    identity = _verified.get(key)
    if identity is None:
        identity = _verify(token, options)
        _verified[key] = identity
        if len(_verified) > VERIFIED_TOKENS:
            with contextlib.suppress(KeyError):  # another thread evicted it first
                _verified.popitem(last=False)
    elif identity.expires_at is not None and identity.expires_at <= time.time():
        raise InvalidToken("token expired")  # as PyJWT: expired once `exp` is reached
    return identity


def read_expired_token(token: str, options: HubOptions) -> Identity:
    """What a token that is valid but for its expiry says (its `expires_at` passed):
    only for a request to a connection renewed since (transports/http.py), which
    decides whether that connection took this very token. InvalidToken for anything
    else wrong with it."""
    key = (token, options.jwt_signing_key, options.jwt_issuer, options.jwt_audience)
    identity = _verified.get(key)
    return identity if identity is not None else _verify(token, options, expired=True)


def _verify(token: str, options: HubOptions, *, expired: bool = False) -> Identity:
    """The token's identity. It must say when it was issued (`iat`: revocation compares
    with it) and live at most JWT_MAX_LIFETIME; JWT_LEEWAY forgives a skewed clock on
    iat, nbf and exp, and the connection's expiry is exp plus it (the same rule).
    `expired`: its expiry is not checked (read_expired_token)."""
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            options.jwt_signing_key,
            algorithms=["HS256"],
            audience=options.jwt_audience,
            issuer=options.jwt_issuer,
            leeway=options.jwt_leeway,
            options={"require": ["exp", "iat", "sub", "iss", "aud"], "verify_exp": not expired},
        )
    except jwt.MissingRequiredClaimError as exc:
        raise InvalidToken(f"token lacks the {exc.claim!r} claim") from exc
    except jwt.ExpiredSignatureError as exc:
        raise InvalidToken("token expired") from exc
    except jwt.InvalidAudienceError as exc:
        raise InvalidToken("token audience is not accepted") from exc
    except jwt.InvalidIssuerError as exc:
        raise InvalidToken("token issuer is not accepted") from exc
    except jwt.InvalidTokenError as exc:
        raise InvalidToken(f"invalid token ({type(exc).__name__})") from exc
    issued_at, expires = float(claims["iat"]), float(claims["exp"])  # numbers: PyJWT checked
    if expires - issued_at > options.jwt_max_lifetime:
        raise InvalidToken("token lives longer than JWT_MAX_LIFETIME")
    try:
        user_id = UUID(str(claims["sub"]))
    except (TypeError, ValueError) as exc:
        raise InvalidToken("token subject is not a user id") from exc
    return Identity(user_id, expires + options.jwt_leeway, issued_at=issued_at)


def bearer_token(headers: dict[bytes, bytes] | None, query: dict[str, list[str]]) -> str | None:
    """The access token from `Authorization: Bearer` or the `access_token` query parameter.

    Browsers cannot set headers on a WebSocket, so the official clients put the token in
    the query string there; it is scrubbed from every log line (ops/logging.py) and from
    Daphne's access log (hub/daphne/server.py).
    """
    if headers:
        value = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, credentials = value.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    values = query.get("access_token")
    return values[0] if values and values[0] else None


def new_connection_token(user_id: UUID, *, stateful: bool = False) -> tuple[str, str]:
    """(connectionId, connectionToken): the token is signed, names its user and says
    whether negotiate granted stateful reconnect."""
    connection_id = uuid7().hex
    data: dict[str, Any] = {"c": connection_id, "u": str(user_id)}
    if stateful:
        data["s"] = 1
    return connection_id, signing.dumps(data, salt=_CONNECTION_SALT)


@dataclass(frozen=True)
class ConnectionGrant:
    """What negotiate granted: a connection id, and whether it may resume (stateful)."""

    connection_id: str
    stateful: bool


def read_connection_token(token: str, user_id: UUID, max_age: float | None) -> ConnectionGrant:
    """The grant of a token issued to this user (no older than max_age seconds, when
    given: a resume of a long-lived connection presents its original token);
    InvalidToken otherwise."""
    age = timedelta(seconds=max_age) if max_age is not None else None
    try:
        data = signing.loads(token, salt=_CONNECTION_SALT, max_age=age)
    except signing.SignatureExpired as exc:
        raise InvalidToken("connection token expired; negotiate again") from exc
    except signing.BadSignature as exc:
        raise InvalidToken("unknown connection id") from exc
    if not isinstance(data, dict) or data.get("u") != str(user_id):
        raise InvalidToken("connection id belongs to another user")
    return ConnectionGrant(str(data["c"]), bool(data.get("s")))


def authenticate(token: str | None, session_user: Any, options: HubOptions) -> UUID:
    """The active user behind a connection or request (synchronous: reads the domain).

    A bearer token wins; otherwise the Django session's user, whom the caller has already
    checked against cross-site use (same origin for WebSockets, CSRF for forms).
    Raises InvalidToken with a reason that is safe to show.
    """
    return identify(token, session_user, options).user_id


def identify(
    token: str | None,
    session_user: Any,
    options: HubOptions,
    session: Any = None,
    *,
    lookup: bool = True,
) -> Identity:
    """As authenticate(), with the credentials' expiry: the token's `exp`, or the end of
    `session` (the Django session the user came from) when there is no token.
    lookup=False skips the domain's user check (a request of a connection whose user was
    checked when it opened: long polls and sends)."""
    if token is not None:
        identity = read_access_token(token, options)
    elif session_user is not None and session_user.is_authenticated:
        key = getattr(session, "session_key", None)
        digest = session_digest(key) if key else None
        identity = Identity(UUID(str(session_user.pk)), session_expiry(session), digest, key)
    else:
        raise InvalidToken("no credentials")
    if lookup:
        check_standing(identity, token)
    return identity


def check_standing(identity: Identity, token: str | None) -> None:
    """InvalidToken unless the user is active and the token was issued after any
    revocation of the user's credentials (synchronous: one read of the domain)."""
    require_standing(get_domain_port().user_standing(identity.user_id), identity, token)


def require_standing(standing: UserStanding, identity: Identity, token: str | None) -> None:
    """check_standing's rule, over a standing already read."""
    if not standing.active:
        raise InvalidToken("unknown user")
    if (
        standing.revoked_at is not None
        and token is not None
        and (identity.issued_at is None or identity.issued_at < standing.revoked_at)
    ):
        raise InvalidToken("token revoked; sign in again")
