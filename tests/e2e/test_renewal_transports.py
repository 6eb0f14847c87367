"""RenewToken on every transport with the official JS client, unchanged: the client keeps
sending the token it negotiated with on every long poll and POST (its access token is
fetched at negotiate, and again only after a 401), so a renewed connection's requests
carry an expired token. Each is accepted until the connection's renewed expiry, bound to
that connection: the same expired token opens nothing else, reaches no other connection,
and is refused once the connection's own expiry passes. A real Daphne and worker, polls
answered every 5 s, so a connection that outlives its first token by two minutes makes
some 25 polls and every ping and invocation past it."""

import json
import time
from collections.abc import Iterator

import jwt
import pytest

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for
from tests.support.hub_http import HUB, RS, LongPoller, bearer, request
from tests.support.runtime import wait_until

# The first test runs its clients for over two minutes past their first token.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("transactional_db"),
    pytest.mark.timeout(300),
]
TRANSPORTS = ["WebSockets", "ServerSentEvents", "LongPolling"]
FIRST_LIFETIME = 4  # s: the token each client connects with
LEEWAY = 2  # JWT_LEEWAY: a token holds until its exp plus this
OUTLIVED = 125  # s the connections run past it: minutes, four CLIENT_TIMEOUTs of pings


@pytest.fixture
def hub_env(worker_env: dict[str, str]) -> dict[str, str]:
    return {**worker_env, "MESSENGER_REALTIME_LONG_POLL_TIMEOUT": "5"}


@pytest.fixture
def started(hub: Hub) -> Iterator[list[HubClient]]:
    clients: list[HubClient] = []
    yield clients
    for client in clients:
        client.kill()


def test_a_renewed_connection_outlives_its_first_token_on_every_transport(
    hub: Hub, started: list[HubClient]
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    first = token_for(bob.id, lifetime=FIRST_LIFETIME)
    expires = jwt.decode(first, options={"verify_signature": False})["exp"]
    clients = {}
    for transport in TRANSPORTS:
        client = HubClient("@microsoft/signalr", hub.url, first, hub.env, {"transport": transport})
        started.append(client)
        assert client.next("state")["state"] == "connected", transport
        clients[transport] = client
    for client in clients.values():
        client.send_line("renew " + token_for(bob.id, lifetime=600))
        assert "expiresAt" in client.next("renewed")["renewed"]
    # Past the first token's expiry (and its leeway), for over two minutes: events keep
    # arriving and invocations keep answering on every transport; nothing reconnects.
    sent = 0
    while time.time() < expires + LEEWAY + OUTLIVED:
        sent += 1
        services.post_message(alice.id, chat.id, f"m{sent}")
        for transport, client in clients.items():
            wait_until(
                lambda c=client, n=sent: (
                    sum(1 for e in c.outputs("event") if e["event"] == "message_received") == n
                ),
                what=f"message {sent} over {transport}",
            )
            assert client.groups(), transport
        time.sleep(5)  # the pace of the traffic, not a synchronisation: polls keep turning
    for transport, client in clients.items():
        states = [o["state"] for o in client.outputs("state")]
        assert states == ["connected"], (transport, states)  # never reconnected nor closed


def test_an_expired_token_is_accepted_only_by_the_connection_that_took_it(hub: Hub) -> None:
    """Connection A opened with token T1 and was renewed; T1 expired. A's polls and POSTs
    with T1 still work; connection B of the same user, which never took T1, refuses it;
    T1 negotiates nothing; and once A's renewed expiry passes, T1 is refused on A too."""
    bob = UserFactory()
    first = token_for(bob.id, lifetime=2)
    a = LongPoller(hub.daphne.port, first)
    a.open()
    renewed = token_for(bob.id, lifetime=6)
    renew = {"type": 1, "invocationId": "r", "target": "RenewToken", "arguments": [renewed]}
    assert a.send(json.dumps(renew) + RS).status == 200
    (answer,) = a.poll().records()
    assert "expiresAt" in answer["result"]
    b = LongPoller(hub.daphne.port, token_for(bob.id, lifetime=600))
    b.open()
    b.token = first  # B's requests now carry A's first token
    expiry = jwt.decode(first, options={"verify_signature": False})["exp"] + LEEWAY
    wait_until(lambda: time.time() > expiry, what="the first token past its expiry")
    negotiated = request(
        hub.daphne.port,
        "POST",
        "?negotiateVersion=1",
        headers=bearer(first),
        path=f"{HUB}/negotiate",
    )
    assert negotiated.status == 401 and b"token expired" in negotiated.body
    ping = '{"type":6}' + RS
    assert a.send(ping).status == 200  # A took it: accepted past its expiry
    refused = b.send(ping)
    assert (refused.status, refused.body) == (401, b"Unauthorized: token expired")
    assert b.poll().status == 401
    # A's renewed expiry passes: the hub closes A, and the first token opens nothing.
    wait_until(lambda: a.poll().status in (204, 401, 404), timeout=20, what="A ended")
    assert a.send(ping).status in (401, 404)
