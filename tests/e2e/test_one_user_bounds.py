"""One authenticated user cannot hurt anyone else (issue 44), against a real Daphne: every
argument a client sends that the hub cannot take is a HubException naming the problem,
never an unexpected error with a traceback in the log; a token says when it was issued,
lives at most JWT_MAX_LIFETIME, and a small clock skew is forgiven (JWT_LEEWAY)."""

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import jwt
import psycopg
import pytest
from websockets.exceptions import InvalidStatus

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.dispatch import connections as db
from project.messenger import services
from tests.support.api_client import Api
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until
from tests.support.shared import shared_in_module
from tests.support.wire import RS, hub_socket, joined, negotiate, records
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def daphne(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    """Handed on from test to test in this module (tests/support/shared.py)."""
    yield from shared_in_module(request, lambda: DaphneProcess(live_env))


@pytest.mark.parametrize("offset", [2**63, 2**70, 10**30])
def test_a_recover_offset_past_any_stream_is_a_hub_exception_naming_it(
    daphne: DaphneProcess, offset: int
) -> None:
    user = UserFactory()
    stream = f"user:{user.id}"
    with joined(daphne, user) as ws:
        call = {
            "type": 1,
            "invocationId": "7",
            "target": "Recover",
            "arguments": [{stream: offset}],
        }
        ws.send(json.dumps(call) + RS)
        (completion,) = records(ws)
    assert completion["invocationId"] == "7"
    assert completion["error"] == (
        "Failed to invoke 'Recover' due to an error on the server. HubException: "
        f"The offset of {stream!r} must be an integer from 0 to {2**63 - 1}."
    )
    assert not any("Traceback" in line for line in daphne.lines)


def signed(claims: dict[str, Any]) -> str:
    """A token with exactly these claims (plus the hub's iss and aud), signed with the
    hub's key: what a host's own minting code might produce."""
    options = load_hub_options()
    base = {"iss": options.jwt_issuer, "aud": options.jwt_audience}
    return jwt.encode({**base, **claims}, options.jwt_signing_key, algorithm="HS256")


def test_tokens_must_say_when_they_were_issued_and_live_at_most_jwt_max_lifetime(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    now = int(time.time())
    no_iat = signed({"sub": str(user.id), "exp": now + 600})
    ten_years = signed({"sub": str(user.id), "iat": now, "exp": now + 10 * 365 * 86_400})
    day_and_more = signed({"sub": str(user.id), "iat": now, "exp": now + 86_400 + 60})
    for token, reason in (
        (no_iat, "token lacks the 'iat' claim"),
        (ten_years, "token lives longer than JWT_MAX_LIFETIME"),
        (day_and_more, "token lives longer than JWT_MAX_LIFETIME"),
    ):
        status, body, _ = negotiate(daphne, token)
        assert (status, body) == (401, {"error": f"Unauthorized: {reason}"})


def test_a_token_from_a_clock_a_second_ahead_is_accepted_within_the_leeway(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    ahead = time.time() + 1  # the issuer's clock runs a second ahead of the hub's
    token = signed({"sub": str(user.id), "iat": ahead, "nbf": int(ahead), "exp": int(ahead) + 600})
    status, body, _ = negotiate(daphne, token)
    assert status == 200, body
    far_ahead = time.time() + 60
    token = signed({"sub": str(user.id), "iat": far_ahead, "exp": int(far_ahead) + 600})
    assert negotiate(daphne, token)[0] == 401


def test_recovering_an_invitation_to_a_call_that_is_over_mints_no_media_credentials(
    daphne: DaphneProcess,
) -> None:
    """The call was declined and the caller then blocked the callee: REST refuses to let
    the callee join (409). Recovering the callee's stream must not mint a room token and
    TURN credentials for it either: the same rule (a session that can still be joined)."""
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    call = services.start_call(alice.id, chat.id)
    services.decline_call(bob.id, call.id)
    services.set_blocked(alice.id, bob.id, True)
    stream = f"user:{bob.id}"
    with joined(daphne, bob) as ws:
        call_frame = {
            "type": 1,
            "invocationId": "1",
            "target": "Recover",
            "arguments": [{stream: 0}],
        }
        ws.send(json.dumps(call_frame) + RS)
        got: list[dict[str, Any]] = []
        while not any(r.get("type") == 3 for r in got):
            got += records(ws)
    invited = [r["arguments"][0] for r in got if r.get("target") == "call_invited"]
    assert len(invited) == 1 and invited[0]["status"] == "Declined"
    assert "media" not in invited[0]  # no room token, no TURN credentials
    assert [r["result"] for r in got if r.get("type") == 3] == [{stream: "recovered"}]


def recover_frames(ws: Any, asked: dict[str, int], invocation: str) -> tuple[int, list[Any]]:
    """Invoke Recover; (bytes of the frames before its completion, the records)."""
    call = {"type": 1, "invocationId": invocation, "target": "Recover", "arguments": [asked]}
    ws.send(json.dumps(call) + RS)
    size, got = 0, []
    while not any(r.get("type") == 3 for r in got):
        frame = ws.recv(timeout=15)
        size += len(frame.encode() if isinstance(frame, str) else frame)
        text = frame if isinstance(frame, str) else frame.decode()
        got += [json.loads(part) for part in text.split(RS)[:-1]]
    return size, got


@pytest.fixture
def small_daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    """Bounds small enough to reach with a few hundred kilobytes."""
    server = DaphneProcess(live_env, recovery_max_bytes=64 * 1024, rate_limit_invocations=50)
    yield server
    server.kill()


def test_one_recover_sends_at_most_its_bytes_and_resyncs_the_streams_past_them(
    small_daphne: DaphneProcess,
) -> None:
    """Before: one ~120-byte call returned every missed event of a chat in one frame
    (9.9 MB against a 1 MiB send bound in the field), and cost one of the rate limit's
    invocations. Now a call sends at most RECOVERY_MAX_BYTES; a stream that does not fit
    is answered "resync" (the client reloads it over REST, no reconnect loop); the call
    is charged to the rate limit by the events it sent."""
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat, small_chat = (services.create_chat(alice.id, [bob.id]) for _ in range(2))
    for n in range(40):  # ~360 KB of events
        services.post_message(alice.id, chat.id, f"{n:03d}" + "x" * 9_000)
    for n in range(40):  # 40 small ones: a recovery of them costs 4 more invocations
        services.post_message(alice.id, small_chat.id, f"{n:03d}")
    chat_stream, user_stream = f"chat:{chat.id}", f"user:{bob.id}"
    small_stream = f"chat:{small_chat.id}"
    with joined(small_daphne, bob) as ws:
        size, got = recover_frames(ws, {user_stream: 0, chat_stream: 0}, "1")
        (completion,) = [r for r in got if r.get("type") == 3]
        assert completion["result"] == {user_stream: "recovered", chat_stream: "resync"}
        assert size <= 64 * 1024 + 1024  # its events, within the bound (+ the completion)
        # The connection goes on: nothing overflowed, nothing closed.
        _, got = recover_frames(ws, {small_stream: 1}, "2")
        assert [r["result"] for r in got if r.get("type") == 3] == [{small_stream: "recovered"}]
        assert len([r for r in got if r.get("target") == "message_received"]) == 40
    # 50 units a window: two Recovers (3 each) and 44 one-unit calls fit, unless the 40
    # events recovered were charged (4 more): then the last 4 or so are refused.
    with joined(small_daphne, bob) as ws:
        refused = 0
        for n in range(44):
            call = {"type": 1, "invocationId": f"g{n}", "target": "WatchPresence"}
            call["arguments"] = [[]]  # a shared method that reads nothing: one unit
            ws.send(json.dumps(call) + RS)
            (reply,) = records(ws)
            refused += "rate limit exceeded" in reply.get("error", "")
    assert refused >= 3


@pytest.fixture
def capped(
    request: pytest.FixtureRequest, live_env: dict[str, str]
) -> Iterator[list[DaphneProcess]]:
    """Two hub processes sharing Redis, with small per-user bounds; handed on from test to
    test in this module, with no connection of the test before still open."""
    bounds = {"max_connections_per_user": 3, "admission_per_user": 2, "admission_wait": 0}

    def start() -> list[DaphneProcess]:
        return [DaphneProcess(live_env, admission_limit=6, **bounds) for _ in range(2)]

    yield from shared_in_module(request, start)


def open_negotiated(server: DaphneProcess, token: str, stack: contextlib.ExitStack) -> Any:
    status, granted, _ = negotiate(server, token)
    assert status == 200, granted
    ws = stack.enter_context(hub_socket(server, token, f"?id={granted['connectionToken']}"))
    ws.send('{"protocol":"json","version":1}' + RS)
    assert records(ws) == [{}]
    return ws


def test_a_user_s_open_connections_are_capped_across_hub_processes(
    capped: list[DaphneProcess],
) -> None:
    """Before: one user opened 19,982 connections in ~31 s until Daphne ran out of file
    descriptors and other users' requests were reset. Now MAX_CONNECTIONS_PER_USER holds
    across every hub process: the next negotiate is 429 with the reason; another user is
    not affected; closing one frees its place."""
    a, b = capped
    greedy, other = UserFactory(), UserFactory()
    token = token_for(greedy.id)
    with contextlib.ExitStack() as stack:
        first = open_negotiated(a, token, stack)
        open_negotiated(a, token, stack)
        open_negotiated(b, token, stack)
        for server in (a, b):
            status, body, headers = negotiate(server, token)
            assert status == 429, body
            assert body == {"error": "Too many requests: at most 3 open connections per user"}
            assert int({k.lower(): v for k, v in headers.items()}["retry-after"]) >= 1
        # A WebSocket that skips negotiate is counted the same (refused at its upgrade).
        with pytest.raises(InvalidStatus):
            hub_socket(b, token)
        assert negotiate(a, token_for(other.id))[0] == 200
        first.close()
        wait_until(lambda: negotiate(b, token)[0] == 200, what="the closed one's place")


def test_websockets_that_skip_negotiate_cannot_hold_everyone_s_connect_slots(
    capped: list[DaphneProcess],
) -> None:
    """Before: 205 WebSockets opened without negotiate and never handshaking held the
    process's connect slots, and another user's negotiate waited 14.9 s. Now such an
    upgrade counts against its user's ADMISSION_PER_USER like a negotiate does."""
    server = capped[0]
    abuser, other = UserFactory(), UserFactory()
    token = token_for(abuser.id)
    with contextlib.ExitStack() as stack:
        stack.enter_context(hub_socket(server, token))  # upgraded, no handshake sent
        stack.enter_context(hub_socket(server, token))
        with pytest.raises(InvalidStatus):  # a third connect in progress for this user
            hub_socket(server, token)
        status, body, _ = negotiate(server, token_for(other.id))
        assert status == 200, body  # not shed: the abuser holds 2 of 6 slots


@pytest.fixture
def connect_limited(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, rate_limit_connects=5)
    yield server
    server.kill()


def test_connect_attempts_are_rate_limited_per_user(connect_limited: DaphneProcess) -> None:
    """Before: reconnecting undid a close for flooding, ~650 connects/s from one user."""
    user, other = UserFactory(), UserFactory()
    token = token_for(user.id)
    answers = [negotiate(connect_limited, token) for _ in range(6)]
    assert [status for status, _, _ in answers] == [200] * 5 + [429]
    assert "rate limit exceeded: at most 5 per 60 s" in answers[-1][1]["error"]
    with pytest.raises(InvalidStatus):  # nor may it skip negotiate instead
        hub_socket(connect_limited, token)
    assert negotiate(connect_limited, token_for(other.id))[0] == 200


def test_a_recover_stuck_in_the_database_holds_up_no_other_user_s_connect_or_rest(
    daphne: DaphneProcess,
) -> None:
    """Before: every hub read of a process ran on asgiref's one sync thread, so one user's
    Recover held every other user's connect behind it (the upgrade got no answer while
    the read was held). Here a Recover's read is held in PostgreSQL (the test locks the
    outbox) while another user lists their chats over REST (Django gives each request
    a thread context of its own) and connects."""
    abuser, other = UserFactory(name="abuser"), UserFactory(name="other")
    chat = services.create_chat(abuser.id, [other.id])
    services.post_message(abuser.id, chat.id, "hello")
    api = Api(daphne.http, token_for(other.id))
    with (
        psycopg.connect(db.conninfo()) as locker,
        joined(daphne, abuser) as ws,
    ):
        locker.execute("LOCK TABLE messenger.realtime_outbox IN ACCESS EXCLUSIVE MODE")
        call = {"type": 1, "invocationId": "r", "target": "Recover"}
        ws.send(json.dumps({**call, "arguments": [{f"chat:{chat.id}": 0}]}) + RS)
        waiting = (
            "SELECT count(*) FROM pg_locks WHERE NOT granted"
            " AND relation = 'messenger.realtime_outbox'::regclass"
        )
        wait_until(lambda: locker.execute(waiting).fetchone() == (1,), what="Recover to wait")
        started = time.monotonic()
        status, listed = api.call("GET", "/api/chats")
        assert status == 200 and [c["chatId"] for c in listed["chats"]] == [str(chat.id)]
        assert time.monotonic() - started < 5  # not behind the held read (its 15 s timeout)
        # Nor does another user's connect wait for it: negotiate and the upgrade read too.
        started = time.monotonic()
        with joined(daphne, other) as theirs:
            call = {"type": 1, "invocationId": "g", "target": "GetGroups", "arguments": []}
            theirs.send(json.dumps(call) + RS)
            (groups,) = records(theirs)
        assert groups["result"][0] == f"user:{other.id}"
        assert time.monotonic() - started < 5
        locker.rollback()  # the read goes on
        got: list[dict[str, Any]] = []
        while not any(r.get("type") == 3 for r in got):
            got += records(ws, timeout=15)
    assert [r["result"] for r in got if r.get("type") == 3] == [{f"chat:{chat.id}": "recovered"}]
