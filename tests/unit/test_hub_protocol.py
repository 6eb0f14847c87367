"""Pure parts of the hub: framing, handshake, messages, credentials, log scrubbing."""

import time
import uuid

import jwt
import pytest
from django.core import signing

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.exceptions import HandshakeError, InvalidToken, ProtocolError
from messenger_realtime.hub.credentials.tokens import (
    bearer_token,
    mint_access_token,
    new_connection_token,
    read_access_token,
    read_connection_token,
)
from messenger_realtime.hub.protocols import json_protocol as protocol
from messenger_realtime.hub.protocols.base import MAX_DEPTH
from messenger_realtime.hub.protocols.handshake import HANDSHAKE_OK, parse_handshake
from messenger_realtime.hub.protocols.json_protocol import RecordBuffer
from messenger_realtime.ops.logging import scrub_query_secrets


def test_record_buffer_splits_several_records_per_frame_and_joins_split_records() -> None:
    buffer = RecordBuffer(max_size=1000)
    assert buffer.feed('{"type":6}\x1e{"type":6}\x1e{"ty') == ['{"type":6}', '{"type":6}']
    assert buffer.feed('pe":7}') == []
    assert buffer.feed("\x1e") == ['{"type":7}']


def test_record_buffer_refuses_a_record_over_the_limit_even_before_its_separator() -> None:
    with pytest.raises(ProtocolError, match="maximum message size of 10B"):
        RecordBuffer(max_size=10).feed('{"type":1,"target":"x"')


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("name", ["json", "messagepack"])
def test_handshake_versions_zero_to_two_are_accepted_for_both_protocols(
    name: str, version: int
) -> None:
    request = parse_handshake(f'{{"protocol":"{name}","version":{version}}}')
    assert (request.protocol, request.version) == (name, version)


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ('{"protocol":"xml","version":1}', "The protocol 'xml' is not supported."),
        (
            '{"protocol":"messagepack","version":3}',
            "The server does not support version 3 of the 'messagepack' protocol.",
        ),
        (
            '{"protocol":"json","version":3}',
            "The server does not support version 3 of the 'json' protocol.",
        ),
        ("hello", "connection handshake. InvalidDataException: Error reading JSON."),
        ("[1]", "Expected a JSON object."),
        ('{"version":1}', "Missing required property 'protocol'."),
        ('{"protocol":"json"}', "Missing required property 'version'."),
    ],
)
def test_bad_handshake_is_refused_with_aspnet_wording(record: str, error: str) -> None:
    with pytest.raises(HandshakeError) as caught:
        parse_handshake(record)
    assert error in str(caught.value)


def test_messagepack_is_refused_on_a_text_only_transport() -> None:
    with pytest.raises(HandshakeError, match="does not support 'Binary' transfer format"):
        parse_handshake('{"protocol":"messagepack","version":1}', binary_ok=False)
    assert parse_handshake('{"protocol":"json","version":1}', binary_ok=False).version == 1


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ("{nope", "Error reading JSON."),
        ("42", "Expected a JSON Object."),
        ("{}", "Missing required property 'type'."),
        ('{"type":"1"}', "Expected 'type' to be of type Number."),
        ('{"type":1,"arguments":[]}', "Missing required property 'target'."),
        ('{"type":1,"target":5}', "Expected 'target' to be of type String."),
        ('{"type":1,"target":"x","arguments":{}}', "Expected 'arguments' to be of type array."),
        ('{"type":1,"target":"x","invocationId":7}', "'invocationId' to be of type String."),
        ('{"type":8}', "Missing required property 'sequenceId'."),
        ('{"type":9,"sequenceId":true}', "Expected 'sequenceId' to be of type Number."),
        ('{"type":9,"sequenceId":"2"}', "Expected 'sequenceId' to be of type Number."),
    ],
)
def test_malformed_message_is_a_protocol_error(record: str, error: str) -> None:
    with pytest.raises(ProtocolError, match=error.replace(".", r"\.")):
        protocol.parse_message(record)


@pytest.mark.parametrize(
    "levels", [64, 900, 5000], ids=["past-max-depth", "deep", "past-recursion"]
)
def test_a_message_nested_too_deeply_is_a_protocol_error_not_a_crash(levels: int) -> None:
    # 5,000 levels: json.loads itself raises RecursionError, which used to escape the
    # hub and close the socket with 1011 (no Close, the connection left registered).
    record = '{"type":1,"target":"x","arguments":[' + "[" * levels + "]" * levels + "]}"
    with pytest.raises(ProtocolError, match="The maximum configured depth of 64"):
        protocol.parse_message(record)


def test_a_message_nested_to_the_limit_parses() -> None:
    levels = MAX_DEPTH - 2  # the message object and its arguments array are two levels
    record = '{"type":1,"target":"x","arguments":[' + "[" * levels + "]" * levels + "]}"
    assert protocol.parse_message(record)["target"] == "x"


def test_unknown_properties_and_message_types_parse_for_the_hub_to_ignore() -> None:
    message = protocol.parse_message('{"type":1,"target":"x","arguments":[],"headers":{"a":"b"}}')
    assert message["target"] == "x"
    assert protocol.parse_message('{"type":42}')["type"] == 42


def test_server_messages_are_framed_with_the_record_separator() -> None:
    assert HANDSHAKE_OK == "{}\x1e"
    assert protocol.PING == '{"type":6}\x1e'
    assert protocol.invocation("message_received", [{"seq": 1}]) == (
        '{"type":1,"target":"message_received","arguments":[{"seq":1}]}\x1e'
    )
    assert protocol.completion("7", result=[1]) == '{"type":3,"invocationId":"7","result":[1]}\x1e'
    assert protocol.completion("7", error="no") == '{"type":3,"invocationId":"7","error":"no"}\x1e'
    assert protocol.close(allow_reconnect=True) == '{"type":7,"allowReconnect":true}\x1e'
    assert protocol.close("bad") == '{"type":7,"error":"bad"}\x1e'
    json_hub = protocol.JsonProtocol(max_message_size=100)
    assert json_hub.ack(3) == '{"type":8,"sequenceId":3}\x1e'
    assert json_hub.sequence(4) == '{"type":9,"sequenceId":4}\x1e'


def test_access_token_round_trip_and_refusals() -> None:
    options = load_hub_options()
    user = uuid.uuid4()
    assert read_access_token(mint_access_token(user, options), options).user_id == user
    refusals = {
        "expired": mint_access_token(user, options, lifetime=-10),
        "forged": mint_access_token(user, load_hub_options(jwt_signing_key="k" * 40)),
        "audience": mint_access_token(user, load_hub_options(jwt_audience="other")),
        "issuer": mint_access_token(user, load_hub_options(jwt_issuer="other")),
        "alg none": jwt.encode(
            {
                "sub": str(user),
                "iss": "messenger",
                "aud": "messenger-realtime",
                "exp": int(time.time()) + 60,
            },
            key=None,
            algorithm="none",
        ),
        "garbage": "not-a-jwt",
    }
    reasons = {}
    for name, token in refusals.items():
        with pytest.raises(InvalidToken) as caught:
            read_access_token(token, options)
        reasons[name] = str(caught.value)
        assert token not in reasons[name]
    assert reasons["expired"] == "token expired"
    assert reasons["audience"] == "token audience is not accepted"
    assert reasons["issuer"] == "token issuer is not accepted"


def test_bearer_token_comes_from_the_header_or_the_access_token_query() -> None:
    assert bearer_token({b"authorization": b"Bearer abc"}, {}) == "abc"
    assert bearer_token({b"authorization": b"bearer  abc "}, {}) == "abc"
    assert bearer_token({}, {"access_token": ["xyz"]}) == "xyz"
    assert bearer_token({b"authorization": b"Basic abc"}, {}) is None
    assert bearer_token(None, {}) is None


def test_connection_token_is_bound_to_its_user_and_expires() -> None:
    user = uuid.uuid4()
    connection_id, token = new_connection_token(user)
    assert read_connection_token(token, user, max_age=60).connection_id == connection_id
    with pytest.raises(InvalidToken, match="another user"):
        read_connection_token(token, uuid.uuid4(), max_age=60)
    with pytest.raises(InvalidToken, match="unknown connection id"):
        read_connection_token(token + "x", user, max_age=60)
    old = signing.dumps({"c": "c1", "u": str(user)}, salt="messenger_realtime.hub.connection")
    with pytest.raises(InvalidToken, match="expired"):
        read_connection_token(old, user, max_age=-1)


def test_connection_token_says_whether_stateful_reconnect_was_granted() -> None:
    user = uuid.uuid4()
    connection_id, token = new_connection_token(user, stateful=True)
    assert read_connection_token(token, user, max_age=60).stateful is True
    assert read_connection_token(new_connection_token(user)[1], user, 60).stateful is False
    # A resume presents the token its connection opened with, however old.
    assert read_connection_token(token, user, max_age=None).connection_id == connection_id


def test_access_log_lines_lose_their_tokens() -> None:
    line = "POST /hubs/messenger/negotiate?access_token=eyJ.abc.def&negotiateVersion=1 200"
    assert scrub_query_secrets(line) == (
        "POST /hubs/messenger/negotiate?access_token=[redacted]&negotiateVersion=1 200"
    )
    assert (
        scrub_query_secrets("GET /hubs/messenger?id=tok123") == "GET /hubs/messenger?id=[redacted]"
    )
