"""Long polling and Server-Sent Events on the wire, against a real Daphne: every request
of the protocol's HTTP endpoints, the status codes ASP.NET Core answers with, the bounds,
and bad input (another user's connection token, transports mixed, oversized posts)."""

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from django.conf import settings

from messenger_realtime.hub.protocols.messagepack import frame
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.hub_helpers import token_for
from tests.support.hub_http import RS, EventStream, LongPoller, bearer, negotiate, request
from tests.support.runtime import run
from tests.support.wire import push_to_user
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
NOT_FOUND = b"No Connection with that ID"
HUB_NEGOTIATE = "/hubs/messenger/negotiate"
ORIGIN = "http://app.example"


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(
        live_env, long_poll_timeout=1, disconnect_timeout=2, cors_allowed_origins=ORIGIN
    )
    yield server
    server.kill()


def test_negotiate_offers_the_three_transports_in_aspnet_cores_order(
    daphne: DaphneProcess,
) -> None:
    body = negotiate(daphne.port, token_for(UserFactory().id))
    assert body["availableTransports"] == [
        {"transport": "WebSockets", "transferFormats": ["Text", "Binary"]},
        {"transport": "ServerSentEvents", "transferFormats": ["Text"]},
        {"transport": "LongPolling", "transferFormats": ["Text", "Binary"]},
    ]


def test_long_polling_from_the_first_poll_to_delete(daphne: DaphneProcess) -> None:
    user = UserFactory()
    poller = LongPoller(daphne.port, token_for(user.id))
    first = poller.poll()
    assert (first.status, first.body) == (200, b"")  # at once: it opens the connection
    assert first.headers["Cache-Control"] == "no-cache, no-store"
    assert first.headers["Expires"] == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert poller.send('{"protocol":"json","version":1}' + RS).status == 200
    handshake = poller.poll()
    assert (handshake.body, handshake.headers["Content-Type"]) == (
        b"{}\x1e",
        "application/octet-stream",
    )
    invocation = '{"type":1,"invocationId":"1","target":"GetGroups","arguments":[]}' + RS
    assert poller.send('{"type":6}' + RS + invocation).status == 200  # two in one body
    assert poller.poll().records() == [
        {"type": 3, "invocationId": "1", "result": [f"user:{user.id}"]}
    ]
    push_to_user(user.id, 1)
    push_to_user(user.id, 2)
    seqs: list[int] = []
    while len(seqs) < 2:  # queued events come together in one poll, or in turn
        seqs += [r["arguments"][0]["seq"] for r in poller.poll().records()]
    assert seqs == [1, 2]
    empty = poller.poll()  # nothing within LONG_POLL_TIMEOUT (1 s here)
    assert (empty.status, empty.body) == (200, b"")
    assert poller.delete().status == 202
    assert (poller.poll().status, poller.send('{"type":6}' + RS).status) == (404, 404)
    daphne.wait_for(f"hub disconnected.*UserId={user.id}")


def test_a_pending_poll_is_answered_as_soon_as_there_is_something(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    poller = LongPoller(daphne.port, token_for(user.id))
    poller.open()
    answers: list[Any] = []
    pending = threading.Thread(target=lambda: answers.append(poller.poll()))
    pending.start()
    push_to_user(user.id, 1)  # while it waits, or just before it: either way it carries it
    pending.join()
    received = answers[0].records() if answers[0].body else poller.poll().records()
    assert [r["arguments"] for r in received] == [[{"seq": 1}]]


def test_no_poll_for_the_disconnect_timeout_ends_the_connection(daphne: DaphneProcess) -> None:
    user = UserFactory()
    poller = LongPoller(daphne.port, token_for(user.id))
    poller.open()
    daphne.wait_for(f"hub connection ended.*UserId={user.id}.*reason=no poll within")
    assert poller.poll().status == 404


def test_the_hubs_close_reaches_the_next_poll_then_204_ends_it(daphne: DaphneProcess) -> None:
    user = UserFactory()
    poller = LongPoller(daphne.port, token_for(user.id))
    poller.open()
    assert poller.send("{garbage" + RS).status == 200  # the error reaches the next poll
    (close,) = poller.poll().records()
    assert close == {
        "type": 7,
        "error": "Connection closed with an error. InvalidDataException: Error reading JSON.",
    }
    assert poller.poll().status == 204  # the official client's "poll terminated"


def test_server_sent_events_from_the_stream_to_its_end(daphne: DaphneProcess) -> None:
    user = UserFactory()
    token = token_for(user.id)
    connection_token = negotiate(daphne.port, token)["connectionToken"]
    stream = EventStream(daphne.port, connection_token, token)
    try:
        assert stream.status == 200
        assert stream.headers["Content-Type"] == "text/event-stream"
        assert stream.headers["Cache-Control"] == "no-cache, no-store"
        assert stream.line() == b":\r\n"  # opens the client's EventSource
        query = f"?id={connection_token}"

        def send(body: str) -> Any:
            return request(daphne.port, "POST", query, body.encode(), bearer(token))

        assert send('{"protocol":"json","version":1}' + RS).status == 200
        assert stream.event() == "{}" + RS
        invocation = '{"type":1,"invocationId":"1","target":"GetGroups","arguments":[]}'
        assert send(invocation + RS).status == 200
        assert stream.records()[0]["result"] == [f"user:{user.id}"]
        push_to_user(user.id, 5)
        assert stream.records()[0]["arguments"] == [{"seq": 5}]
        again = EventStream(daphne.port, connection_token, token)
        assert again.status == 409  # one stream per connection
        again.close()
        delete = request(daphne.port, "DELETE", query, headers=bearer(token))
        assert delete.body == b"Cannot terminate this connection using the DELETE endpoint."
        poll = request(daphne.port, "GET", query + "&_=1", headers=bearer(token))
        assert (poll.status, poll.body) == (400, b"Cannot change transports mid-connection")
    finally:
        stream.close()  # the client goes: the connection ends
    daphne.wait_for(f"hub disconnected.*UserId={user.id}")
    assert request(daphne.port, "POST", query, b'{"type":6}\x1e', bearer(token)).status == 404


def test_messagepack_is_refused_on_server_sent_events_and_works_on_long_polling(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id)
    connection_token = negotiate(daphne.port, token)["connectionToken"]
    stream = EventStream(daphne.port, connection_token, token)
    try:
        stream.line()
        handshake = '{"protocol":"messagepack","version":1}' + RS
        request(daphne.port, "POST", f"?id={connection_token}", handshake.encode(), bearer(token))
        assert (
            "does not support 'Binary' transfer format" in json.loads(stream.event()[:-1])["error"]
        )
        assert stream.line() == b""  # the stream ends
    finally:
        stream.close()
    poller = LongPoller(daphne.port, token)
    poller.open("messagepack")
    poller.send(frame(msgpack.packb([1, {}, "1", "GetGroups", []])))
    body = poller.poll().body
    assert msgpack.unpackb(body[1:]) == [3, {}, "1", 3, [f"user:{user.id}"]]


@pytest.mark.parametrize(
    ("case", "status", "body"),
    [
        ("no id", 400, b"Connection ID required"),
        ("unknown id", 404, NOT_FOUND),
        ("another user's connection token", 404, NOT_FOUND),
        ("no credentials", 401, b"Unauthorized: no credentials"),
        ("expired token", 401, b"Unauthorized: token expired"),
        ("PUT", 405, b""),
    ],
)
def test_bad_requests_get_the_protocols_status_and_nothing_else(
    daphne: DaphneProcess, case: str, status: int, body: bytes
) -> None:
    owner, intruder = UserFactory(), UserFactory()
    victim = LongPoller(daphne.port, token_for(owner.id))
    victim.open()
    connection_token, token = victim.connection_token, token_for(intruder.id)
    query, method, headers = f"?id={connection_token}&_=9", "GET", bearer(token)
    if case == "no id":
        query = "?_=9"
    elif case == "unknown id":
        query = "?id=nope&_=9"
    elif case == "no credentials":
        headers = {}
    elif case == "expired token":
        headers = bearer(token_for(intruder.id, lifetime=-5))
    elif case == "PUT":
        method = "PUT"
    answer = request(daphne.port, method, query, headers=headers)
    assert (answer.status, answer.body) == (status, body)
    assert answer.headers["Content-Type"] == "text/plain"
    if case == "another user's connection token":  # nor may they send or end it
        forged = request(daphne.port, "POST", query, b'{"type":7}\x1e', headers)
        assert (forged.status, request(daphne.port, "DELETE", query, headers=headers).status) == (
            404,
            404,
        )
    victim.send('{"type":1,"invocationId":"1","target":"GetGroups","arguments":[]}' + RS)
    assert victim.poll().records()[0]["result"] == [f"user:{owner.id}"]  # untouched


def test_a_post_on_a_websocket_connection_is_405(daphne: DaphneProcess) -> None:
    from tests.support.wire import hub_socket, records

    user = UserFactory()
    token = token_for(user.id)
    connection_token = negotiate(daphne.port, token)["connectionToken"]
    with hub_socket(daphne, token, f"?id={connection_token}") as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        post = request(daphne.port, "POST", f"?id={connection_token}", b"{}", bearer(token))
        assert (post.status, post.body) == (
            405,
            b"POST requests are not allowed for WebSocket connections.",
        )


def test_an_oversized_post_is_413_and_closes_the_connection(daphne: DaphneProcess) -> None:
    poller = LongPoller(daphne.port, token_for(UserFactory().id))
    poller.open()
    assert poller.send(b"x" * (16 * 32768 + 1)).status == 413
    (close,) = poller.poll().records()
    assert "The maximum message size of 32768B was exceeded." in close["error"]


def test_a_record_over_the_message_size_in_a_post_closes_the_connection(
    daphne: DaphneProcess,
) -> None:
    poller = LongPoller(daphne.port, token_for(UserFactory().id))
    poller.open()
    assert poller.send("x" * 40_000 + RS).status == 200  # within the body's cap, not a record's
    (close,) = poller.poll().records()
    assert "The maximum message size of 32768B was exceeded." in close["error"]


def test_tokens_never_reach_the_logs_of_the_http_transports(daphne: DaphneProcess) -> None:
    user = UserFactory()
    token = token_for(user.id)
    poller = LongPoller(daphne.port, token)
    poller.open()
    stream_token = negotiate(daphne.port, token)["connectionToken"]
    stream = EventStream(daphne.port, stream_token, token)
    stream.line()
    stream.close()
    request(daphne.port, "GET", f"?id={poller.connection_token}&access_token={token}x")
    daphne.wait_for(f"hub disconnected.*UserId={user.id}")
    log = "\n".join(daphne.lines)
    for secret in (token, poller.connection_token, stream_token):
        assert secret not in log
    assert "access_token=[redacted]" in log


# -- the send bound ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bounded(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, send_buffer_limit=65536)
    yield server
    server.kill()


def flood(user: Any, events: int = 100, pad: int = 8000) -> None:
    async def push() -> None:
        channel_layer = layer(str(settings.REDIS_URL))
        for seq in range(events):
            message = {"type": "realtime.event", "event": "contact_removed"}
            await channel_layer.group_send(
                f"user.{user.id}", {**message, "payload": {"seq": seq, "pad": "x" * pad}}
            )

    run(push())


def test_a_long_polling_client_that_stops_polling_is_closed_past_the_bound(
    bounded: DaphneProcess,
) -> None:
    user = UserFactory()
    poller = LongPoller(bounded.port, token_for(user.id))
    poller.open()
    flood(user)  # 800 kB queued for nobody: far past 64 kB
    line = bounded.wait_for(f"hub connection closed.*UserId={user.id}")
    assert "reason=send buffer over SEND_BUFFER_LIMIT" in line
    assert poller.poll().records() == [{"type": 7, "allowReconnect": True}]  # only that


def test_an_event_stream_that_is_not_read_is_closed_past_the_bound(
    bounded: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id)
    connection_token = negotiate(bounded.port, token)["connectionToken"]
    stuck = socket.create_connection(("127.0.0.1", bounded.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(
        f"GET /hubs/messenger?id={connection_token}&access_token={token} HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    opened = b""
    while b":\r\n" not in opened.partition(b"\r\n\r\n")[2]:  # the stream is open
        opened += stuck.recv(1)
    try:
        query = f"?id={connection_token}"
        handshake = request(
            bounded.port, "POST", query, b'{"protocol":"json","version":1}\x1e', bearer(token)
        )
        assert handshake.status == 200
        bounded.wait_for(f"hub connected.*UserId={user.id}.*transport=ServerSentEvents")
        flood(user, events=300)  # 2.4 MB for a stream nobody reads
        line = bounded.wait_for(f"hub connection closed.*UserId={user.id}", timeout=30)
        assert "reason=send buffer over SEND_BUFFER_LIMIT" in line and "unsent=" in line
    finally:
        stuck.close()


# -- the transports on offer and session authentication --------------------------------


@pytest.fixture(scope="module")
def websockets_only(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, transports="WebSockets")
    yield server
    server.kill()


def test_transports_not_on_offer_are_refused_as_aspnet_core_does(
    websockets_only: DaphneProcess,
) -> None:
    token = token_for(UserFactory().id)
    body = negotiate(websockets_only.port, token, "?negotiateVersion=1&useStatefulReconnect=true")
    assert [t["transport"] for t in body["availableTransports"]] == ["WebSockets"]
    assert body["useStatefulReconnect"] is True
    query = f"?id={body['connectionToken']}"
    stream = EventStream(websockets_only.port, body["connectionToken"], token)
    assert (stream.status, stream.response.read()) == (
        404,
        b"ServerSentEvents transport not supported by this end point type",
    )
    stream.close()
    poll = request(websockets_only.port, "GET", query + "&_=1", headers=bearer(token))
    assert poll.body == b"LongPolling transport not supported by this end point type"


def test_the_session_of_the_projects_own_pages_works_from_its_origin_only(
    daphne: DaphneProcess,
) -> None:
    from tests.support.wire import session_cookie

    user = UserFactory()
    cookie = session_cookie(user)
    response = request(
        daphne.port, "POST", "?negotiateVersion=1", headers={"Cookie": cookie}, path=HUB_NEGOTIATE
    )
    connection_token = json.loads(response.body)["connectionToken"]
    query = f"?id={connection_token}&_=1"
    foreign = {"Cookie": cookie, "Origin": "http://evil.example"}
    refused = request(daphne.port, "GET", query, headers=foreign)
    assert (refused.status, refused.body) == (
        401,
        b"Unauthorized: origin not allowed for session authentication",
    )
    own = {"Cookie": cookie, "Origin": daphne.http}
    assert request(daphne.port, "GET", query, headers=own).status == 200
    handshake = b'{"protocol":"json","version":1}\x1e'
    assert request(daphne.port, "POST", f"?id={connection_token}", handshake, own).status == 200
    daphne.wait_for(f"hub connected.*UserId={user.id}.*transport=LongPolling")


def test_cors_is_granted_to_configured_origins_on_the_hubs_endpoint(
    daphne: DaphneProcess,
) -> None:
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    answer = request(daphne.port, "OPTIONS", "?id=x", headers=preflight)
    assert answer.status == 204
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert answer.headers["access-control-allow-credentials"] == "true"
    assert "DELETE" in answer.headers["access-control-allow-methods"]
    assert "authorization" in answer.headers["access-control-allow-headers"]
    poller = LongPoller(daphne.port, token_for(UserFactory().id))
    query = f"?id={poller.connection_token}&_=1"
    allowed = request(daphne.port, "GET", query, headers={**bearer(poller.token), "Origin": ORIGIN})
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    evil = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    assert (
        "access-control-allow-origin"
        not in request(daphne.port, "OPTIONS", "?id=x", headers=evil).headers
    )
