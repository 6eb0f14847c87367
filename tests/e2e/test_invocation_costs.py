"""Every invocation pays for what it costs (issue 56), against a real Daphne, Redis and
PostgreSQL: each hub method's declared cost is charged to its connection's budget (and,
where declared, to its user's rate limit); a connection that floods past its budget is
closed, whatever it sends; a client that writes faster than the hub works is held back
by TCP, not buffered; the per-user cap holds at the transport's open, not only at
negotiate; typing is bounded per user and chat across connections and processes; and
WatchPresence pays by the users it checks."""

import concurrent.futures
import contextlib
import json
import os
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core import signing
from websockets.exceptions import InvalidStatus

from messenger_realtime.hub.credentials.tokens import _CONNECTION_SALT as SALT
from messenger_realtime.hub.user_connections import KEY as PLACES
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.hub_http import LongPoller, bearer, request
from tests.support.runtime import wait_until
from tests.support.shared import shared_in_module
from tests.support.wire import (
    RS,
    StuckClient,
    hub_socket,
    joined,
    negotiate,
    push_to_user,
    records,
    until_closed,
)
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def daphne(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    """Handed on from test to test in this module (tests/support/shared.py)."""
    yield from shared_in_module(request, lambda: DaphneProcess(live_env))


def call(target: str, arguments: list[Any], invocation_id: str | None = None) -> str:
    message: dict[str, Any] = {"type": 1, "target": target, "arguments": arguments}
    if invocation_id is not None:
        message["invocationId"] = invocation_id
    return json.dumps(message) + RS


def closing_error(seen: list[dict[str, Any]]) -> str:
    closes = [r for r in seen if r.get("type") == 7]
    assert closes, f"no Close among {seen[-3:]}"
    return str(closes[-1].get("error"))


# -- every invocation pays ------------------------------------------------------------


@pytest.mark.parametrize(
    "target, arguments",
    [
        ("Acknowledge", [{}, 0]),
        ("Typing", ["CHAT"]),
        ("GetGroups", []),
        ("NoSuchMethod", []),
    ],
)
def test_a_flood_of_any_invocation_closes_the_connection(
    daphne: DaphneProcess, target: str, arguments: list[Any]
) -> None:
    """Before: Acknowledge and Typing were charged nothing, and one connection writing
    them at line rate held Daphne at ~0.93 CPU-s/s and grew it by ~160 MB, never closed.
    Now every invocation (an unknown one too) is charged to its connection's budget, and
    past it the connection is closed as a flood."""
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    arguments = [str(chat.id) if a == "CHAT" else a for a in arguments]
    with joined(daphne, alice) as ws:
        frame = call(target, arguments) * 250  # fire and forget: no answers to read
        with contextlib.suppress(Exception):  # the server may close while we write
            for _ in range(40):  # 10,000 invocations
                ws.send(frame)
        seen = until_closed(ws, timeout=15)
    error = closing_error(seen)
    assert "invocation budget exceeded" in error or "rate limit exceeded" in error, error


def test_a_flood_of_pings_closes_the_connection(daphne: DaphneProcess) -> None:
    """Pings cost next to nothing each, but at line rate they are a core: they are
    charged to the connection's budget too (a client pings every 15 s)."""
    with joined(daphne, UserFactory()) as ws:
        with contextlib.suppress(Exception):
            for _ in range(25):
                ws.send('{"type":6}\x1e' * 400)
        seen = until_closed(ws, timeout=15)
    assert "invocation budget exceeded" in closing_error(seen)


def test_a_flood_is_read_no_further_once_closed_and_costs_its_user_connects(
    daphne: DaphneProcess,
) -> None:
    """Before: a connection closed for flooding waited for its client's WebSocket Close,
    reading all it still sent at line rate meanwhile (the Close queued behind it), and
    its user reconnected at once to flood again. Now nothing more it sends is read (the
    client's writes stall once the kernel's buffers are full, until the close-handshake
    timeout ends the connection), and the close costs its user 10 connects of
    RATE_LIMIT_CONNECTS."""
    user = UserFactory()
    client = StuckClient(daphne, token_for(user.id))  # handshaken; sends only what we write
    flood = masked_frame((call("NoSuchMethod", []) * 300).encode())
    with contextlib.closing(client.sock) as sock:
        sock.sendall(flood)
        sock.settimeout(10)
        received = b""
        while b'"type":7' not in received:  # the hub's Close message
            received += sock.recv(65536)
        assert b"invocation budget exceeded" in received
        # Fill the kernel's buffers: from then on the socket has room again only if the
        # server reads (before: it did, at ~11 MB/s), or once it drops the connection.
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError, ConnectionResetError, BrokenPipeError):
            while True:
                sock.send(flood)
        _, writable, _ = select.select([], [sock], [], 0.5)
        if writable:  # only because the connection is gone: a send fails
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                sock.send(flood)
    log = redis.Redis.from_url(str(settings.REDIS_URL))
    with log:
        connects = log.zcard(f"messenger_realtime:rate:connect:{user.id}")
    assert connects == 1 + 10  # its own connect, and the flood's


def test_a_client_within_its_budget_is_never_refused(daphne: DaphneProcess) -> None:
    """What the official clients do, as fast as they do it: a burst of a page's calls
    at connect, then typing at keystroke rate and an acknowledgement now and then."""
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(bob.id, [alice.id])  # bob took part: alice may watch him
    with joined(daphne, alice) as ws:
        ws.send(call("GetGroups", [], "g") + call("WatchPresence", [[str(bob.id)]], "w"))
        for n in range(30):
            ws.send(call("Typing", [str(chat.id)], f"t{n}"))
        ws.send(call("Acknowledge", [{}, 0], "a"))
        answers: dict[str, Any] = {}
        while len(answers) < 33:
            for record in records(ws):
                if record.get("type") == 3:
                    answers[record["invocationId"]] = record
    assert not [a for a in answers.values() if "error" in a], answers


def rss_mb(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.fixture
def lavish(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    """A budget no client reaches: what a client that writes faster than the hub works
    costs without any closing it."""
    server = DaphneProcess(
        live_env, invocation_budget=10**6, invocation_burst=10**6, rate_limit_invocations=0
    )
    yield server
    server.kill()


def test_a_client_that_writes_faster_than_the_hub_works_is_held_back_by_tcp(
    lavish: DaphneProcess,
) -> None:
    """Before: Daphne read the socket into the application's queue as fast as it came
    (~160,000 records/s; +160 MB RSS). Now a connection with more than a few messages
    waiting is not read: the client's writes block, and the process holds next to
    nothing of what it sent."""
    user = UserFactory()
    # Recovers: each a read of the database, slower for the hub to work than for the
    # socket to bring (~100 bytes).
    payload = masked_frame((call("Recover", [{f"user:{user.id}": 0}]) * 300).encode())
    client = StuckClient(lavish, token_for(user.id))  # handshaken, never reads
    with contextlib.closing(client.sock) as sock:
        wait_until(lambda: sock.recv(64, socket.MSG_PEEK), what="the handshake's answer")
        before = rss_mb(lavish.proc.pid)
        sock.setblocking(False)
        written = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                written += sock.send(payload[written % len(payload) :])
            except BlockingIOError:
                time.sleep(0.005)
        grown = rss_mb(lavish.proc.pid) - before
    # Loopback would take hundreds of MB in 3 s; the kernel's buffers hold a few MB,
    # and the hub works off a few MB more in that time.
    assert written < 32e6, written  # 329 MB before
    assert grown < 16, grown  # +389 MB before


def test_a_long_polling_client_sending_in_parallel_is_refused_not_queued(
    lavish: DaphneProcess,
) -> None:
    """The same for the HTTP transports: a connection's sends are acted on one at a
    time, and a POST past the one waiting its turn is refused (429), not held."""
    user = UserFactory()
    poller = LongPoller(lavish.port, token_for(user.id))
    poller.open()
    body = call("Recover", [{f"user:{user.id}": 0}]) * 1500  # each a read: seconds of work
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        statuses = sorted(pool.map(lambda _: poller.send(body).status, range(4)))
    assert statuses[0] == 200 and statuses[-1] == 429, statuses


def masked_frame(payload: bytes) -> bytes:
    """One masked client text frame (RFC 6455), the mask all zeros: payload unchanged."""
    size = len(payload)
    head = bytes((0x81,)) + (
        bytes((0x80 | size,))
        if size < 126
        else bytes((0x80 | 126,)) + size.to_bytes(2, "big")
        if size < 65536
        else bytes((0x80 | 127,)) + size.to_bytes(8, "big")
    )
    return head + b"\0\0\0\0" + payload


# -- the cap at the transport's open ---------------------------------------------------


@pytest.fixture
def capped(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    yield from shared_in_module(
        request, lambda: DaphneProcess(live_env, max_connections_per_user=2)
    )


def lapsed_grant(user: Any) -> dict[str, str]:
    """What a negotiate granted 15 s ago, its place lapsed since (a place lasts 20 s
    without renewal; nothing renews a place whose transport never opened): a connection
    token signed as negotiate signs it, for an id made then."""
    made_ms = int((time.time() - 15) * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (made_ms << 80) | (0x7 << 76) | (rand >> 16 & 0xFFF) << 64 | (0b10 << 62)
    connection_id = uuid.UUID(int=value | (rand & ((1 << 62) - 1))).hex
    data = {"c": connection_id, "u": str(user.id)}
    return {"connectionId": connection_id, "connectionToken": signing.dumps(data, salt=SALT)}


def open_ws(
    server: DaphneProcess, token: str, granted: dict[str, Any], stack: contextlib.ExitStack
) -> Any:
    ws = stack.enter_context(hub_socket(server, token, f"?id={granted['connectionToken']}"))
    ws.send('{"protocol":"json","version":1}' + RS)
    assert records(ws) == [{}]
    return ws


@pytest.mark.parametrize("transport", ["WebSockets", "LongPolling", "ServerSentEvents"])
def test_a_place_that_lapsed_before_its_transport_opened_is_taken_again_or_refused(
    capped: DaphneProcess, transport: str
) -> None:
    """Before: a negotiated place lapsed after 20 s, and opening the transport later
    took none: one user held 48 open WebSockets while the cap counted 1. Now the open
    takes its place again, and is refused when the user already holds the cap."""
    user = UserFactory()
    token = token_for(user.id)
    places = redis.Redis.from_url(str(settings.REDIS_URL))
    with contextlib.ExitStack() as stack:
        for _ in range(2):  # the cap, held by two fresh connections
            open_ws(capped, token, negotiate(capped, token)[1], stack)
        assert places.zcard(PLACES.format(user=user.id)) == 2
        refused = "refused" if transport == "WebSockets" else "refused 429"
        assert opened_on(capped, token, lapsed_grant(user), transport, stack) == refused
        assert places.zcard(PLACES.format(user=user.id)) == 2
    # With a place free, the lapsed one's open takes it again: counted, and online.
    wait_until(lambda: places.zcard(PLACES.format(user=user.id)) == 0, what="places freed")
    grant = lapsed_grant(user)
    with contextlib.ExitStack() as stack:
        assert opened_on(capped, token, grant, transport, stack) == "opened"
        members = places.zrange(PLACES.format(user=user.id), 0, -1)
        assert [m.decode() for m in members] == [grant["connectionId"]]
    places.close()


def opened_on(
    server: DaphneProcess,
    token: str,
    granted: dict[str, Any],
    transport: str,
    stack: contextlib.ExitStack,
) -> str:
    """Open the negotiated connection on `transport` (held open until `stack` closes):
    "opened" or "refused"."""
    query = f"?id={granted['connectionToken']}"
    if transport == "WebSockets":
        try:
            open_ws(server, token, granted, stack)
        except InvalidStatus:
            return "refused"
        return "opened"
    if transport == "LongPolling":
        first = request(server.port, "GET", query, headers=bearer(token))
        return "opened" if first.status == 200 else f"refused {first.status}"
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=10))
    sock.sendall(
        (
            f"GET /hubs/messenger{query} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        ).encode()
    )
    head = sock.recv(4096)
    return "opened" if head.startswith(b"HTTP/1.1 200") else f"refused {head[9:12].decode()}"


# -- typing per user and chat ------------------------------------------------------------


@pytest.fixture
def two(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[list[DaphneProcess]]:
    yield from shared_in_module(request, lambda: [DaphneProcess(live_env) for _ in range(2)])


def test_typing_publishes_once_per_user_and_chat_across_connections_and_processes(
    two: list[DaphneProcess],
) -> None:
    """Before: typing was bounded per connection, so 32 connections of one user made
    32 publishes per interval into the same chat. Now at most one per user and chat per
    TYPING_INTERVAL, whichever connection or process calls."""
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    with contextlib.ExitStack() as stack:
        typists = [stack.enter_context(joined(server, alice)) for server in two for _ in range(3)]
        watcher = stack.enter_context(joined(two[0], bob))
        for n, ws in enumerate(typists):
            ws.send(call("Typing", [str(chat.id)], f"t{n}"))
            while not any(r.get("type") == 3 for r in records(ws)):
                pass
        push_to_user(bob.id, 0)  # a marker behind whatever typing reached bob
        typed = []
        while True:
            got = records(watcher)
            typed += [r for r in got if r.get("target") == "typing"]
            if any(r.get("target") == "contact_removed" for r in got):
                break
    assert len(typed) == 1, typed


# -- WatchPresence pays by what it checks ---------------------------------------------------


@pytest.fixture
def counted(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    yield from shared_in_module(
        request, lambda: DaphneProcess(live_env, rate_limit_invocations=12, rate_limit_flood=50)
    )


def test_watch_presence_is_charged_by_the_users_it_checks(counted: DaphneProcess) -> None:
    """Before: a WatchPresence of 200 users cost ~47 CPU-ms and one invocation of the
    rate limit, the same as a GetGroups. Now it is charged one more per 10 users it
    checks: a watch of 30 users costs 4, so the third in a window of 12 is refused."""
    alice = UserFactory()
    others = UserFactory.create_batch(30)
    chat = services.create_chat(alice.id, [u.id for u in others])
    for other in others:  # each took part: alice may watch them
        services.post_message(other.id, chat.id, "here")
    users = [str(u.id) for u in others]
    with joined(counted, alice) as ws:
        answers = []
        for n in range(4):
            ws.send(call("WatchPresence", [users], f"w{n}"))
            answers.append(next(r for r in records(ws) if r.get("type") == 3))
    assert ["error" in a for a in answers] == [False, False, False, True], answers
    assert "rate limit exceeded" in answers[3]["error"]
