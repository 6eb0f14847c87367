"""User content: the rule for a value both hub protocols carry exactly, the field each
refusal names, the encoders that must then never fail, and the error codes that make a
row permanent."""

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest
from channels_redis.serializers import registry

from messenger_realtime.conf.declared import CONTENT_BOUNDS
from messenger_realtime.contracts import content
from messenger_realtime.contracts.base import TIME_FIELDS, TIMED_OBJECTS
from messenger_realtime.contracts.content import WIRE_LIMITS, ContentError, ContentLimits
from messenger_realtime.exceptions import INVALID_ROW_CODES, InvalidRow, UnencodablePayload
from messenger_realtime.hub.protocols import json_protocol, messagepack
from messenger_realtime.outbox.operations import PERMANENT_ERRORS

APP = Path(__file__).resolve().parents[2] / "messenger_realtime"
API = ContentLimits(max_depth=8, max_entries=100, max_key_length=128, max_string=10_000)


def deep(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "field", "problem"),
    [
        ({"size": 2**96}, "fileMeta.size", "is out of range (integers within ±9007199254740991)"),
        ({"size": 2**53}, "fileMeta.size", "is out of range (integers within ±9007199254740991)"),
        ({"n": -(2**53)}, "fileMeta.n", "is out of range (integers within ±9007199254740991)"),
        ({"x": math.nan}, "fileMeta.x", "is not a finite number (no NaN or Infinity)"),
        ({"x": [1, math.inf]}, "fileMeta.x[1]", "is not a finite number (no NaN or Infinity)"),
        (deep(9), "fileMeta", "is nested deeper than 8 levels"),
        ({"k": list(range(101))}, "fileMeta.k", "has more than 100 items"),
        ({str(n): n for n in range(101)}, "fileMeta", "has more than 100 keys"),
        ({"k" * 129: 1}, "fileMeta", "has a key longer than 128 characters"),
        ({"tags": ["x" * 10_001]}, "fileMeta.tags[0]", "is longer than 10000 characters"),
        ({"name": "a\ud800"}, "fileMeta.name", "holds an unpaired surrogate character"),
        ({1: "a"}, "fileMeta", "has a key that is not a string"),
        ({"b": b"bytes"}, "fileMeta.b", "is a bytes, not a JSON value"),
        ({"s": {1, 2}}, "fileMeta.s", "is a set, not a JSON value"),
    ],
)
def test_a_value_past_the_rule_is_refused_naming_its_field(
    value: Any, field: str, problem: str
) -> None:
    with pytest.raises(ContentError) as refused:
        content.check(value, "fileMeta", API)
    assert (refused.value.field, refused.value.problem) == (field, problem)
    assert str(refused.value) == f"{field} {problem}"


def test_values_within_the_rule_pass() -> None:
    value = {
        "name": "report.pdf",
        "size": 2**53 - 1,
        "ratio": -0.5,
        "createdAt": "2024-05-01",
        "tags": ["a", None, True, {"x": [1, 2]}],
        "nested": deep(7),
    }
    content.check(value, "fileMeta", API)


def test_nesting_is_checked_without_recursion_whatever_its_depth() -> None:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(ContentError, match="fileMeta is nested deeper than 8 levels"):
        content.check(value, "fileMeta", API)


def test_a_whole_payload_names_its_top_level_field_with_that_fields_bound() -> None:
    with pytest.raises(ContentError) as refused:
        content.check({"seq": 1, "fileMeta": deep(40)}, "", WIRE_LIMITS)
    assert str(refused.value) == "fileMeta is nested deeper than 31 levels"


def test_a_key_named_in_an_error_is_cut_short() -> None:
    with pytest.raises(ContentError) as refused:
        content.check({"k" * 100: 2**60}, "fileMeta", WIRE_LIMITS)
    assert refused.value.field == "fileMeta." + "k" * content.KEY_SHOWN


def test_what_the_api_may_be_set_to_accept_stays_within_what_the_build_accepts() -> None:
    # fileMeta sits one level down in its payload.
    assert CONTENT_BOUNDS["CONTENT_MAX_DEPTH"] <= WIRE_LIMITS.max_depth - 1
    assert CONTENT_BOUNDS["CONTENT_MAX_ENTRIES"] <= WIRE_LIMITS.max_entries
    assert CONTENT_BOUNDS["CONTENT_MAX_KEY_LENGTH"] <= WIRE_LIMITS.max_key_length
    assert CONTENT_BOUNDS["CONTENT_MAX_STRING"] <= WIRE_LIMITS.max_string


# -- the encoders: whatever the build lets through, every one of them carries exactly ------

LAYER = registry.get_serializer("msgpack")  # channels-redis' own, as the worker's layer


def layer_round_trip(payload: dict[str, Any]) -> Any:
    return LAYER.deserialize(LAYER.serialize({"payload": payload}))["payload"]


def json_round_trip(payload: dict[str, Any]) -> Any:
    record = json_protocol.invocation("message_received", [payload])
    # strict JSON, as a browser parses it: NaN or Infinity would not parse
    parsed = json.loads(record.rstrip(json_protocol.RS), parse_constant=_no_constant)
    return parsed["arguments"][0]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def messagepack_round_trip(payload: dict[str, Any]) -> Any:
    body = messagepack.invocation("message_received", [payload])
    length_end = next(i for i, byte in enumerate(body) if not byte & 0x80) + 1
    items = msgpack.unpackb(body[length_end:], raw=False, timestamp=3)
    return items[4][0]


ENCODERS = {
    "channel layer": layer_round_trip,
    "json": json_round_trip,
    "messagepack": messagepack_round_trip,
}
# Everything a user (or a legacy row) can put in fileMeta that has tripped, or could trip,
# an encoder: each is either refused by the build's check or carried exactly by all three.
HOSTILE = [
    {"name": "a", "createdAt": "2024-05-01"},  # a time's key name inside content
    {"name": "a", "sentAt": "not a date", "participant": {"joinedAt": "2024"}},
    {"name": "a", "size": 2**96},
    {"name": "a", "size": 2**64},
    {"name": "a", "size": -(2**63) - 1},
    {"name": "a", "size": 2**53},
    {"name": "a", "size": 2**53 - 1},
    {"name": "a", "size": -(2**53) + 1},
    {"name": "a", "x": math.nan},
    {"name": "a", "x": math.inf},
    {"name": "a", "x": 1e308},
    deep(30),
    deep(31),
    deep(600),
    {"name": "a\ud800"},
    {"name": "\x00"},
    {"name": "a", "t": "x" * 100_000},
    {"name": "a", 1: "int key"},
    {"name": "a", "b": b"\xff"},
    {"name": "a", "tuple": (1, 2)},
    {"name": "a", "emoji": "😀", "rtl": "\u202e"},
]


@pytest.mark.parametrize("file_meta", HOSTILE, ids=range(len(HOSTILE)))
def test_content_the_build_accepts_every_encoder_carries_exactly(file_meta: Any) -> None:
    payload = {
        "chatId": "c",
        "seq": 1,
        "sentAt": "2024-05-01T10:00:00+00:00",
        "fileMeta": file_meta,
    }
    try:
        content.check(payload, "", WIRE_LIMITS)
    except ContentError:
        return  # refused: quarantined at build, it never reaches an encoder
    for name, round_trip in ENCODERS.items():
        assert round_trip(payload)["fileMeta"] == file_meta, name


@pytest.mark.parametrize("file_meta", HOSTILE, ids=range(len(HOSTILE)))
def test_content_any_encoder_refuses_or_changes_is_refused_by_the_build(file_meta: Any) -> None:
    payload = {"chatId": "c", "seq": 1, "fileMeta": file_meta}
    broken = []
    for name, round_trip in ENCODERS.items():
        try:
            if round_trip(payload)["fileMeta"] != file_meta:
                broken.append(name)
        except Exception:
            broken.append(name)
    if broken:
        with pytest.raises(ContentError):
            content.check(payload, "", WIRE_LIMITS)


def test_messagepack_converts_only_the_declared_time_fields() -> None:
    payload = {
        "sentAt": "2024-05-01T10:00:00+00:00",
        "fileMeta": {"createdAt": "2024-05-01", "at": "2024-05-01T10:00:00+00:00"},
        "participant": {"joinedAt": "2024-05-01T10:00:00+00:00", "userId": "u"},
        "recording": {"startedAt": "2024-05-01T10:00:00+00:00"},
    }
    carried = messagepack_round_trip(payload)
    moment = datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert carried["sentAt"] == carried["participant"]["joinedAt"] == moment  # timestamps
    assert carried["recording"]["startedAt"] == moment
    assert carried["fileMeta"] == payload["fileMeta"]  # user content, untouched
    assert {"participant", "recording"} == TIMED_OBJECTS
    assert "createdAt" in TIME_FIELDS  # the same key name, converted only where declared


# -- error codes ------------------------------------------------------------------------


def test_every_invalid_row_code_the_app_raises_is_declared_permanent() -> None:
    raised = set()
    for path in APP.rglob("*.py"):
        raised |= set(re.findall(r'InvalidRow\(f?"([A-Za-z]+):', path.read_text()))
    assert raised, "the scan found no InvalidRow"
    assert raised <= set(INVALID_ROW_CODES)
    assert PERMANENT_ERRORS == INVALID_ROW_CODES
    assert {"SessionKindMismatch", "UnencodablePayload"} <= set(PERMANENT_ERRORS)


def test_an_undeclared_code_cannot_be_raised() -> None:
    with pytest.raises(ValueError, match="not in INVALID_ROW_CODES"):
        InvalidRow("SomethingNew: detail")
    assert str(UnencodablePayload("fileMeta.size is out of range")) == (
        "UnencodablePayload: fileMeta.size is out of range"
    )
