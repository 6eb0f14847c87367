"""RenewToken, end to end: a connected client hands over a fresh token for its user and
its connection outlives the old one's expiry, nothing reconnecting; every other token (another
user's, an expired, an older or a revoked one, or any on a session's connection) is refused
with its reason and the connection keeps its old expiry. A real Daphne, real WebSocket
clients, tokens minted and verified as in production."""

import json
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from websockets.sync.client import ClientConnection, connect

from messenger_realtime.conf.settings import load_hub_options
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.wire import RS, events_until_closed, hub_socket, records, session_cookie
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


def expiry_of(token: str) -> float:
    """When the hub ends a connection that holds `token`: its exp plus JWT_LEEWAY."""
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    return float(exp) + load_hub_options().jwt_leeway


def handshake(ws: ClientConnection) -> ClientConnection:
    ws.send('{"protocol":"json","version":1}' + RS)
    assert records(ws) == [{}]
    return ws


def renew(ws: ClientConnection, token: Any, invocation_id: str = "r") -> dict[str, Any]:
    """Invoke RenewToken and return its Completion (events pushed meanwhile skipped)."""
    message = {"type": 1, "invocationId": invocation_id, "target": "RenewToken"}
    ws.send(json.dumps({**message, "arguments": [token]}) + RS)
    while True:
        for record in records(ws):
            if record.get("type") == 3 and record.get("invocationId") == invocation_id:
                return record


def test_a_renewed_token_keeps_the_connection_open_past_the_old_ones_expiry(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    short = token_for(user.id, lifetime=3)
    old_expiry = expiry_of(short)
    with hub_socket(daphne, short) as ws:
        handshake(ws)
        fresh = token_for(user.id, lifetime=600)
        completion = renew(ws, fresh)
        assert completion == {
            "type": 3,
            "invocationId": "r",
            "result": {"expiresAt": expiry_of(fresh)},
        }
        seen = events_until_closed(ws, user.id, until=old_expiry + 3)
    assert seen["close"] == {}, "the connection outlived its first token"
    assert any(seen["pushed"][seq] > old_expiry for seq in seen["received"])
    assert fresh not in daphne.log() and short not in daphne.log()


def test_refused_renewals_say_why_and_the_old_expiry_still_ends_the_connection(
    daphne: DaphneProcess,
) -> None:
    """Each refused token on one connection (so the expiry is waited for once): another
    user's, an expired, an older (minted before the connection's own), a revoked one
    (minted before the revocation) and not a token at all."""
    user = UserFactory()
    older = token_for(user.id)  # minted before the connection's own, and the revocation
    services.revocation.log_out_everywhere(user.id)
    refusals = {
        "token is for another user": token_for(UserFactory().id),
        "token expired": token_for(user.id, lifetime=-30),
        "token revoked; sign in again": older,
        "RenewToken takes an access token (a non-empty string)": 42,
    }
    newer_but_older = token_for(user.id)  # after the revocation, before the connection's
    short = token_for(user.id, lifetime=3)
    old_expiry = expiry_of(short)
    with hub_socket(daphne, short) as ws:
        handshake(ws)
        answers = {
            reason: renew(ws, token, str(n)) for n, (reason, token) in enumerate(refusals.items())
        }
        answers["token is older than the connection's"] = renew(ws, newer_but_older, "older")
        seen = events_until_closed(ws, user.id, until=old_expiry + 6)
    for reason, completion in answers.items():
        assert "result" not in completion, reason
        assert completion["error"].endswith(f" HubException: {reason}"), completion
    assert seen["close"] == {"type": 7, "allowReconnect": True}
    assert old_expiry <= seen["closed_at"] < old_expiry + 6


def test_a_sessions_connection_has_no_token_to_renew(daphne: DaphneProcess) -> None:
    user = UserFactory()
    headers = {"Cookie": session_cookie(user)}
    with connect(
        f"{daphne.ws}/hubs/messenger", additional_headers=headers, origin=daphne.http
    ) as ws:
        completion = renew(handshake(ws), token_for(user.id))
    assert completion["error"].endswith(
        " HubException: this connection came with a session, not a token: nothing to renew"
    )
