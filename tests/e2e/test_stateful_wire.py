"""Stateful reconnect on the wire, against a real Daphne, with a plain WebSocket client
sending exactly what each case needs: negotiate's grant, numbering, Acks, the resume
(Sequence, replay, duplicates dropped), its refusals, and malformed Ack/Sequence."""

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection

from messenger_realtime.hub.connection import FIRST_MESSAGE_WAIT
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.wire import (
    RS,
    assert_closed,
    hub_socket,
    invoke,
    negotiate,
    push_to_user,
    records,
)
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
STATEFUL = "?negotiateVersion=1&useStatefulReconnect=true"


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


def negotiated(daphne: DaphneProcess, user: Any, query: str = STATEFUL) -> str:
    status, body, _ = negotiate(daphne, token_for(user.id), query=query)
    assert status == 200
    return str(body["connectionToken"])


@contextlib.contextmanager
def open_stateful(
    daphne: DaphneProcess, user: Any, connection_token: str, version: int = 2, ping: bool = True
) -> Iterator[ClientConnection]:
    with hub_socket(daphne, token_for(user.id), f"?id={connection_token}") as ws:
        ws.send(json.dumps({"protocol": "json", "version": version}) + RS)
        assert records(ws) == [{}]
        if ping:
            ws.send('{"type":6}' + RS)  # as the official client: its first message after it
        yield ws


def drop(ws: ClientConnection) -> None:
    """End the TCP connection without a WebSocket close (a network blip: code 1006)."""
    with contextlib.suppress(OSError):
        ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


def until(ws: ClientConnection, accept: Any, timeout: float = 5) -> list[dict[str, Any]]:
    """Records up to and including the first one `accept` takes (pings skipped)."""
    seen: list[dict[str, Any]] = []
    while not seen or not accept(seen[-1]):
        seen += [r for r in records(ws, timeout) if r.get("type") != 6]
    return seen


def is_event(seq: int) -> Any:
    return lambda r: r.get("type") == 1 and r["arguments"][0]["seq"] == seq


def test_negotiate_grants_stateful_reconnect_only_when_asked(daphne: DaphneProcess) -> None:
    token = token_for(UserFactory().id)
    _, asked, _ = negotiate(daphne, token, query="?negotiateVersion=1&UseStatefulReconnect=True")
    _, plain, _ = negotiate(daphne, token)
    _, old, _ = negotiate(daphne, token, query="?useStatefulReconnect=true")  # version 0
    assert asked["useStatefulReconnect"] is True
    assert "useStatefulReconnect" not in plain and "useStatefulReconnect" not in old


def test_a_dropped_connection_resumes_with_the_sequence_then_what_was_not_acked(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    connection_token = negotiated(daphne, user)
    with open_stateful(daphne, user, connection_token) as first:
        for seq in (1, 2, 3):
            push_to_user(user.id, seq)
        until(first, is_event(3))
        first.send(json.dumps({"type": 8, "sequenceId": 1}) + RS)  # event 1 acked; 2, 3 not
        invoke(first, "GetGroups", "a")  # the client's sequenced message 1
        until(first, lambda r: r.get("invocationId") == "a")  # server's message 4
        assert until(first, lambda r: r.get("type") == 8) == [{"type": 8, "sequenceId": 1}]
        drop(first)
    daphne.wait_for(f"hub connection detached.*UserId={user.id}")
    push_to_user(user.id, 5)  # sent while detached: buffered
    with hub_socket(daphne, token_for(user.id), f"?id={connection_token}") as second:
        replay = until(second, is_event(5))  # no handshake on a resume
        assert replay[0] == {"type": 9, "sequenceId": 2}
        assert [r["arguments"][0]["seq"] for r in replay if r["type"] == 1] == [2, 3, 5]
        assert [r.get("invocationId") for r in replay if r["type"] == 3] == ["a"]
        # The client resends what it thinks is unacked: "a" is dropped as a duplicate.
        second.send(json.dumps({"type": 9, "sequenceId": 1}) + RS)
        invoke(second, "GetGroups", "a")
        invoke(second, "GetGroups", "b")
        answers = until(second, lambda r: r.get("invocationId") == "b")
        assert [r.get("invocationId") for r in answers if r["type"] == 3] == ["b"]
    line = daphne.wait_for(f"hub connection resumed.*UserId={user.id}")
    assert "replayed=4" in line


def test_events_wait_for_the_clients_first_message_or_half_a_second(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    with open_stateful(daphne, user, negotiated(daphne, user), ping=False) as quiet:
        handshaken = time.monotonic()
        push_to_user(user.id, 1)
        with pytest.raises(TimeoutError):
            records(quiet, timeout=0.2)  # held back: the client has said nothing yet
        assert until(quiet, is_event(1), timeout=2)[-1]["arguments"] == [{"seq": 1}]
        # Held for FIRST_MESSAGE_WAIT from the handshake (the test saw the handshake's
        # answer a moment after the hold began), and then sent without waiting longer.
        assert time.monotonic() - handshaken >= FIRST_MESSAGE_WAIT - 0.1


def test_a_resume_replaces_a_half_open_socket(daphne: DaphneProcess) -> None:
    user = UserFactory()
    connection_token = negotiated(daphne, user)
    with (
        open_stateful(daphne, user, connection_token) as old,
        hub_socket(daphne, token_for(user.id), f"?id={connection_token}") as new,
    ):
        assert records(new) == [{"type": 9, "sequenceId": 1}]
        assert_closed(old)  # the server dropped the socket it thought alive
        push_to_user(user.id, 1)
        assert until(new, is_event(1))[-1]["arguments"] == [{"seq": 1}]


@pytest.mark.parametrize(
    "case",
    ["another user", "not stateful", "version 1 handshake", "closed cleanly", "sent Close"],
)
def test_a_resume_is_refused_before_accept_when_it_may_not_resume(
    daphne: DaphneProcess, case: str
) -> None:
    user, intruder = UserFactory(), UserFactory()
    query = "?negotiateVersion=1" if case == "not stateful" else STATEFUL
    connection_token = negotiated(daphne, user, query)
    version = 1 if case == "version 1 handshake" else 2
    with open_stateful(daphne, user, connection_token, version) as original:
        if case == "closed cleanly":
            original.close()
        elif case == "sent Close":
            original.send('{"type":7}' + RS)
            assert_closed(original)
        if case in ("closed cleanly", "sent Close"):
            daphne.wait_for(f"hub disconnected.*UserId={user.id}")
        who = intruder if case == "another user" else user
        with (
            pytest.raises(InvalidStatus) as refused,
            hub_socket(daphne, token_for(who.id), f"?id={connection_token}"),
        ):
            pass
        assert refused.value.response.status_code == 403
        if case in ("another user", "not stateful", "version 1 handshake"):
            invoke(original, "GetGroups")  # the connection itself is untouched
            assert until(original, lambda r: r.get("type") == 3)[-1]["invocationId"] == "1"


def test_a_resume_after_the_server_closed_the_connection_is_refused(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    connection_token = negotiated(daphne, user)
    short = token_for(user.id, lifetime=2)
    with hub_socket(daphne, short, f"?id={connection_token}") as ws:
        ws.send('{"protocol":"json","version":2}' + RS)
        assert records(ws) == [{}]
        ws.send('{"type":6}' + RS)
        closed = until(ws, lambda r: r.get("type") == 7, timeout=10)
        assert closed[-1] == {"type": 7, "allowReconnect": True}  # the token expired
    with (
        pytest.raises(InvalidStatus) as refused,
        hub_socket(daphne, token_for(user.id), f"?id={connection_token}"),
    ):
        pass
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ('{"type":8}', "InvalidDataException: Missing required property 'sequenceId'."),
        (
            '{"type":9,"sequenceId":"1"}',
            "InvalidDataException: Expected 'sequenceId' to be of type Number.",
        ),
        (
            '{"type":9,"sequenceId":5}',
            "InvalidOperationException: Sequence ID greater than amount of messages we've "
            "received.",
        ),
    ],
)
def test_a_malformed_ack_or_sequence_closes_the_connection_with_the_protocols_error(
    daphne: DaphneProcess, message: str, error: str
) -> None:
    user = UserFactory()
    with open_stateful(daphne, user, negotiated(daphne, user)) as ws:
        ws.send(message + RS)
        close = until(ws, lambda r: r.get("type") == 7)[-1]
        assert close["error"] == f"Connection closed with an error. {error}"
        assert "allowReconnect" not in close
        assert_closed(ws)


def test_acks_beyond_what_was_sent_and_acks_without_stateful_reconnect_are_harmless(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    with (
        open_stateful(daphne, user, negotiated(daphne, user)) as stateful,
        open_stateful(daphne, user, negotiated(daphne, user, "?negotiateVersion=1"), 1) as plain,
    ):
        for ws in (stateful, plain):
            ws.send('{"type":8,"sequenceId":99}' + RS + '{"type":9,"sequenceId":1}' + RS)
            invoke(ws, "GetGroups")
            assert until(ws, lambda r: r.get("type") == 3)[-1]["result"] == [f"user:{user.id}"]
