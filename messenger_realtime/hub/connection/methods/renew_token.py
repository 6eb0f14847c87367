"""The `RenewToken` hub method: a connected client hands over a fresh access token for
its user before the one it connected with expires; the connection's expiry moves to the
new token's and nothing reconnects (docs/hub.md, "Renewing the token"). Without it,
every client whose token was minted in the same minute would reconnect in the same
minute, each with its connect's reads and its `Recover`.

Refused with its reason (a HubException), the connection keeping its old expiry: a token
that is invalid or expired; one for another user; one issued before the connection's
own (a replayed older token); one issued before a revocation of the user's credentials,
or for a user no longer active (one read of the domain, as at the upgrade); any token on
a connection that came with a Django session (the session's expiry rules it, and a
logout closes it). Each call costs RENEW_UNITS (5) units, of its connection's budget and
of the user's invocation rate limit (it checks a token and reads the domain). The token
is never logged or kept: only when it expires and was issued.
"""

from typing import Any

from messenger_realtime.exceptions import HubError, InvalidToken
from messenger_realtime.hub.connection.methods import Cost, hub_method
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.credentials.tokens import check_standing, read_access_token
from messenger_realtime.hub.reads import hub_read

_check_standing = hub_read(check_standing)
# A token's signature and claims checked, then a read of the domain: about five calls
# that do next to nothing (bench/one_user.py: at one unit, 32 connections renewing at
# line rate moved a bystander's REST p95 to 2.9x its baseline).
RENEW_UNITS = 5


@hub_method("RenewToken", cost=Cost(call=RENEW_UNITS, shared=True))
async def renew_token(connection: Connection, access_token: Any) -> dict[str, float]:
    """The connection's new expiry (`expiresAt`, unix seconds) once the token is taken."""
    if not isinstance(access_token, str) or not access_token:
        raise HubError("RenewToken takes an access token (a non-empty string)")
    held = connection.auth
    if held.issued_at is None:
        raise HubError("this connection came with a session, not a token: nothing to renew")
    try:
        identity = read_access_token(access_token, connection.options)
    except InvalidToken as exc:
        raise HubError(str(exc)) from exc
    if identity.user_id != connection.user_id:
        raise HubError("token is for another user")
    try:  # first: a revoked token is told as revoked, however old
        await _check_standing(identity, access_token)  # revoked since, or no longer active
    except InvalidToken as exc:
        raise HubError(str(exc)) from exc
    assert identity.issued_at is not None and identity.expires_at is not None  # a token's
    if identity.issued_at < held.issued_at:
        raise HubError("token is older than the connection's")
    held.renew(identity, access_token, connection.loop)
    return {"expiresAt": identity.expires_at}
