"""The hub on the wire: negotiate over HTTP and the JSON hub protocol over WebSockets,
against a real Daphne, with a plain WebSocket client sending exactly what each case needs."""

import signal
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import UserFactory
from tests.support.helpers import layer, options
from tests.support.hub_helpers import token_for
from tests.support.runtime import run
from tests.support.shared import shared_in_module
from tests.support.wire import (
    RS,
    StuckClient,
    assert_closed,
    hub_socket,
    invoke,
    joined,
    negotiate,
    records,
    session_cookie,
)
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
ORIGIN = "http://app.example"


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, cors_allowed_origins=ORIGIN)
    yield server
    server.kill()


# -- negotiate -----------------------------------------------------------------------


def test_negotiate_v1_returns_a_connection_id_a_secret_token_and_websockets(
    daphne: DaphneProcess,
) -> None:
    status, body, _ = negotiate(daphne, token_for(UserFactory().id))
    assert status == 200
    assert body["negotiateVersion"] == 1
    assert body["availableTransports"][0] == {
        "transport": "WebSockets",
        "transferFormats": ["Text", "Binary"],
    }
    assert body["connectionToken"] != body["connectionId"]
    assert "useStatefulReconnect" not in body


@pytest.mark.parametrize(
    ("query", "path", "version"),
    [
        ("", "/hubs/messenger/negotiate", 0),
        ("?negotiateVersion=5", "/hubs/messenger/negotiate", 1),
        ("?NegotiateVersion=1", "/hubs/messenger/negotiate/", 1),
    ],
)
def test_negotiate_answers_version_zero_or_its_highest_with_or_without_slash(
    daphne: DaphneProcess, query: str, path: str, version: int
) -> None:
    status, body, _ = negotiate(daphne, token_for(UserFactory().id), query=query, path=path)
    assert (status, body["negotiateVersion"]) == (200, version)
    assert ("connectionToken" in body) is (version == 1)


def test_negotiate_refuses_bad_versions_and_methods_with_a_reason(daphne: DaphneProcess) -> None:
    token = token_for(UserFactory().id)
    _, body, _ = negotiate(daphne, token, query="?negotiateVersion=x")
    assert body == {"error": "The client requested a non-integer protocol version."}
    _, body, _ = negotiate(daphne, token, query="?negotiateVersion=-1")
    assert "does not support this version" in body["error"]
    status, _, headers = negotiate(daphne, token, method="GET")
    assert (status, headers["Allow"]) == (405, "POST, OPTIONS")


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("missing", "no credentials"),
        ("expired", "token expired"),
        ("forged", "invalid token"),
        ("audience", "audience"),
        ("unknown user", "unknown user"),
    ],
)
def test_negotiate_without_valid_credentials_is_401(
    daphne: DaphneProcess, case: str, reason: str
) -> None:
    user = UserFactory().id
    token = {
        "missing": None,
        "expired": token_for(user, lifetime=-5),
        "forged": token_for(user, jwt_signing_key="x" * 40),
        "audience": token_for(user, jwt_audience="somebody-else"),
        "unknown user": token_for(uuid.uuid4()),
    }[case]
    status, body, headers = negotiate(daphne, token)
    assert status == 401 and reason in body["error"]
    assert headers["WWW-Authenticate"].startswith("Bearer")


def test_negotiate_accepts_the_access_token_query_parameter(daphne: DaphneProcess) -> None:
    token = token_for(UserFactory().id)
    status, body, _ = negotiate(daphne, query=f"?negotiateVersion=1&access_token={token}")
    assert status == 200 and body["connectionToken"]


def test_cors_is_granted_to_configured_origins_only(daphne: DaphneProcess) -> None:
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    status, _, headers = negotiate(daphne, method="OPTIONS", headers=preflight)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert headers["Access-Control-Allow-Credentials"] == "true"
    assert "authorization" in headers["Access-Control-Allow-Headers"]
    evil = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    _, _, headers = negotiate(daphne, method="OPTIONS", headers=evil)
    assert "Access-Control-Allow-Origin" not in headers


# -- connecting ----------------------------------------------------------------------


def test_websocket_with_the_negotiated_token_joins_the_users_groups(daphne: DaphneProcess) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    token = token_for(bob.id)
    _, body, _ = negotiate(daphne, token)
    with hub_socket(daphne, token, f"?id={body['connectionToken']}") as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        invoke(ws, "GetGroups")
        assert records(ws) == [
            {"type": 3, "invocationId": "1", "result": [f"user:{bob.id}", f"chat:{chat.id}"]}
        ]


def test_version_zero_id_and_skip_negotiation_with_query_token_both_connect(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id)
    _, body, _ = negotiate(daphne, token, query="")
    for query in (f"?id={body['connectionId']}", f"?access_token={token}"):
        with hub_socket(daphne, token if "id=" in query else None, query) as ws:
            ws.send('{"protocol":"json","version":0}' + RS)
            assert records(ws) == [{}]


@pytest.mark.parametrize("case", ["no credentials", "expired", "another user's id"])
def test_websocket_without_valid_credentials_is_refused_before_accept(
    daphne: DaphneProcess, case: str
) -> None:
    owner, intruder = UserFactory(), UserFactory()
    _, body, _ = negotiate(daphne, token_for(owner.id))
    token, query = {
        "no credentials": (None, ""),
        "expired": (token_for(intruder.id, lifetime=-5), ""),
        "another user's id": (token_for(intruder.id), f"?id={body['connectionToken']}"),
    }[case]
    with pytest.raises(InvalidStatus) as refused, hub_socket(daphne, token, query):
        pass
    assert refused.value.response.status_code == 403


def test_a_negotiated_token_opens_one_connection_only(daphne: DaphneProcess) -> None:
    user = UserFactory()
    token = token_for(user.id)
    _, body, _ = negotiate(daphne, token)
    query = f"?id={body['connectionToken']}"
    with hub_socket(daphne, token, query) as first:
        first.send('{"protocol":"json","version":1}' + RS)
        assert records(first) == [{}]
        with pytest.raises(InvalidStatus) as refused, hub_socket(daphne, token, query):
            pass
        assert refused.value.response.status_code == 403
        invoke(first, "GetGroups")  # the first one is untouched
        assert records(first)[0]["result"] == [f"user:{user.id}"]
    line = daphne.wait_for("hub connection refused.*connection cannot resume")
    assert body["connectionToken"] not in line


# -- handshake -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handshake", "error"),
    [
        ('{"protocol":"xml","version":1}', "The protocol 'xml' is not supported."),
        ('{"protocol":"json","version":9}', "The server does not support version 9"),
        ("GET / HTTP/1.1", "An unexpected error occurred during connection handshake."),
    ],
)
def test_bad_handshake_gets_an_error_response_then_the_socket_closes(
    daphne: DaphneProcess, handshake: str, error: str
) -> None:
    with hub_socket(daphne, token_for(UserFactory().id)) as ws:
        ws.send(handshake + RS)
        (response,) = records(ws)
        assert error in response["error"]
        assert_closed(ws)


def test_handshake_and_messages_may_share_frames_and_span_frames(daphne: DaphneProcess) -> None:
    with hub_socket(daphne, token_for(UserFactory().id)) as ws:
        call = '{"type":1,"invocationId":"%s","target":"GetGroups","arguments":[]}' + RS
        ws.send('{"protocol":"json","version":1}' + RS + call % "a" + call % "b" + call[:20])
        answers = records(ws) + records(ws) + records(ws)
        ws.send((call % "c")[20:].replace("%s", "c"))
        answers += records(ws)
    assert answers[0] == {}
    assert [a.get("invocationId") for a in answers[1:]] == ["a", "b", "c"]


def test_binary_frames_carry_the_same_json(daphne: DaphneProcess) -> None:
    with hub_socket(daphne, token_for(UserFactory().id)) as ws:
        ws.send(('{"protocol":"json","version":1}' + RS).encode())
        assert records(ws) == [{}]
        ws.send(b'{"type":1,"invocationId":"1","target":"GetGroups","arguments":[]}' + RS.encode())
        assert records(ws)[0]["invocationId"] == "1"


# -- invocations ---------------------------------------------------------------------


def test_every_invocation_with_an_id_gets_exactly_one_completion_and_others_none(
    daphne: DaphneProcess,
) -> None:
    with joined(daphne, UserFactory()) as ws:
        ws.send('{"type":1,"target":"Nope","arguments":[]}' + RS)  # no id: no answer
        invoke(ws, "Nope", "1")
        invoke(ws, "GetGroups", "2", arguments=[1])
        ws.send('{"type":4,"invocationId":"3","target":"GetGroups","arguments":[]}' + RS)
        ws.send('{"type":6}' + RS + '{"type":42}' + RS + '{"type":5,"invocationId":"9"}' + RS)
        invoke(ws, "GetGroups", "4", headers={"Authorization": "Bearer ignored"})
        answers = [records(ws)[0] for _ in range(4)]
    assert [(a["type"], a["invocationId"]) for a in answers] == [
        (3, "1"),
        (3, "2"),
        (3, "3"),
        (3, "4"),
    ]
    assert answers[0]["error"] == (
        "Failed to invoke 'Nope' due to an error on the server. "
        "HubException: Method does not exist."
    )
    assert "Invocation provides 1 argument(s) but target expects 0." in answers[1]["error"]
    assert answers[2]["error"] == (
        "The client attempted to invoke the non-streaming 'GetGroups' method "
        "with a streaming invocation."
    )
    assert "result" in answers[3]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ("{garbage" + RS, "Error reading JSON."),
        ("x" * 40_000, "The maximum message size of 32768B was exceeded."),
        (b"\xff\xfe" + RS.encode(), "Invalid UTF-8"),
    ],
)
def test_a_broken_message_closes_only_its_connection_with_a_reason(
    daphne: DaphneProcess, payload: str | bytes, error: str
) -> None:
    user = UserFactory()
    with joined(daphne, user) as bystander, joined(daphne, user) as broken:
        broken.send(payload)
        (close,) = records(broken)
        assert close["type"] == 7 and error in close["error"]
        assert close["error"].startswith("Connection closed with an error.")
        assert_closed(broken)
        invoke(bystander, "GetGroups")
        assert records(bystander)[0]["result"] == [f"user:{user.id}"]


def test_server_events_are_invocations_without_an_id_carrying_one_payload(
    daphne: DaphneProcess,
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    with joined(daphne, bob) as ws:
        message = services.post_message(alice.id, chat.id, "hello")
        run(one_pass(options(), ChannelLayerPublisher(layer(str(settings.REDIS_URL)))))
        events = []
        while not any(e.get("target") == "message_received" for e in events):
            events += records(ws)
    (event,) = [e for e in events if e.get("target") == "message_received"]
    message.refresh_from_db()
    assert event == {
        "type": 1,
        "target": "message_received",
        "arguments": [
            {
                "chatId": str(chat.id),
                "messageId": str(message.id),
                "seq": 1,
                "senderUserId": str(alice.id),
                "kind": "Text",
                "sentAt": message.sent_at.isoformat(),
                "body": "hello",
                "stream": f"chat:{chat.id}",
                "offset": RealtimeOutboxEntry.objects.get(message_id=message.id).stream_offset,
            }
        ],
    }


# -- timers, shutdown, logs --------------------------------------------------------------


@pytest.fixture
def quick_daphne(
    request: pytest.FixtureRequest, live_env: dict[str, str]
) -> Iterator[DaphneProcess]:
    """Short timers (each connection's own), handed on from test to test in this module."""
    timers = {"keepalive_interval": 0.3, "client_timeout": 1.5, "handshake_timeout": 1}
    yield from shared_in_module(request, lambda: DaphneProcess(live_env, **timers))


def test_idle_server_pings_and_drops_a_silent_client(quick_daphne: DaphneProcess) -> None:
    with joined(quick_daphne, UserFactory()) as ws:
        seen = []
        while not seen or seen[-1]["type"] == 6:
            seen += records(ws, timeout=5)
        assert {"type": 6} in seen  # keep-alive pings while the client said nothing
        assert seen[-1] == {
            "type": 7,
            "error": "Connection closed with an error. OperationCanceledException: Client "
            "hasn't sent a message/ping within the configured ClientTimeoutInterval.",
            "allowReconnect": True,
        }
        assert_closed(ws)


def test_client_pings_keep_the_connection_open(quick_daphne: DaphneProcess) -> None:
    with joined(quick_daphne, UserFactory()) as ws:
        pings = 0
        while pings < 10:  # ~3 s of server pings, twice the client timeout
            assert records(ws, timeout=5) == [{"type": 6}]
            ws.send('{"type":6}' + RS)
            pings += 1
        invoke(ws, "GetGroups")
        assert records(ws)[0]["invocationId"] == "1"


def test_missing_handshake_times_out_with_handshake_was_canceled(
    quick_daphne: DaphneProcess,
) -> None:
    with hub_socket(quick_daphne, token_for(UserFactory().id)) as ws:
        assert records(ws, timeout=5) == [{"error": "Handshake was canceled."}]
        assert_closed(ws)


def test_daphne_shutdown_sends_close_with_allow_reconnect(live_env: dict[str, str]) -> None:
    server = DaphneProcess(live_env)
    try:
        with joined(server, UserFactory()) as ws:
            server.signal(signal.SIGTERM)
            assert records(ws) == [{"type": 7, "allowReconnect": True}]
            assert_closed(ws)
        assert server.wait() == 0
    finally:
        server.kill()


def test_tokens_never_reach_the_logs(daphne: DaphneProcess) -> None:
    user = UserFactory()
    token = token_for(user.id)
    _, body, _ = negotiate(daphne, query=f"?negotiateVersion=1&access_token={token}")
    query = f"?id={body['connectionToken']}&access_token={token}"
    with hub_socket(daphne, None, query) as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        invoke(ws, "GetGroups", headers={"Authorization": f"Bearer {token}"})
        records(ws)
    negotiate(daphne, token + "x")  # refused ones are logged too
    negotiate(daphne, query=f"?negotiateVersion=1&access_token={token}x")
    daphne.wait_for("WSDISCONNECT")
    log = "\n".join(daphne.lines)
    assert "access_token=[redacted]" in log
    assert token not in log and body["connectionToken"] not in log


# -- session authentication ----------------------------------------------------------


def test_the_django_session_authenticates_the_projects_own_pages(daphne: DaphneProcess) -> None:
    user = UserFactory()
    cookie = session_cookie(user)
    status, body, _ = negotiate(daphne, headers={"Cookie": cookie})
    assert status == 200 and body["connectionToken"]
    same_site = {"Cookie": cookie}
    url = f"{daphne.ws}/hubs/messenger?id={body['connectionToken']}"
    with connect(url, additional_headers=same_site, origin=daphne.http) as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]


def test_a_session_cookie_from_a_foreign_page_is_refused(daphne: DaphneProcess) -> None:
    cookie = session_cookie(UserFactory())
    url = f"{daphne.ws}/hubs/messenger"
    with (
        pytest.raises(InvalidStatus) as refused,
        connect(url, additional_headers={"Cookie": cookie}, origin="http://evil.example"),
    ):
        pass
    assert refused.value.response.status_code == 403


# -- a client that stops reading -------------------------------------------------------


def test_a_client_that_stops_reading_is_dropped_and_others_keep_receiving(
    quick_daphne: DaphneProcess,
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    stuck = StuckClient(quick_daphne, token_for(bob.id))
    quick_daphne.wait_for(f"hub connected.* UserId={bob.id}")
    with joined(quick_daphne, alice) as reader:
        invoke(reader, "GetGroups")  # alice's groups include the chat: flood it
        while "result" not in records(reader)[-1]:
            pass
        body = "x" * 8000

        async def flood() -> None:
            channel_layer = layer(str(settings.REDIS_URL))
            for seq in range(300):
                await channel_layer.group_send(
                    f"chat.{chat.id}",
                    {
                        "type": "realtime.event",
                        "chat": str(chat.id),
                        "event": "message_received",
                        "payload": {"seq": seq, "pad": body},
                    },
                )

        flooding = threading.Thread(target=run, args=(flood(),))
        flooding.start()
        received = 0
        while received < 300:  # alice reads every event as it comes while bob is stuck
            for record in records(reader):
                if record.get("target") == "message_received":
                    assert record["arguments"][0]["seq"] == received
                    received += 1
                elif record["type"] == 6:
                    reader.send('{"type":6}' + RS)
        flooding.join()
    assert stuck.read_until_closed(timeout=30) != "open"
    # Silent and not reading: the client timeout or the send bound, whichever comes first.
    line = quick_daphne.wait_for(f"hub connection closed.*UserId={bob.id}")
    assert "ClientTimeoutInterval" in line or "SEND_BUFFER_LIMIT" in line
