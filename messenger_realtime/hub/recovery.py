"""Recovery from the database: what a client missed on each stream it names, read in one
snapshot and built as the worker builds it (the `Recover` hub method).

A client that was away holds, for each stream (`chat:{ChatId}`, `user:{UserId}`), the
last offset it received (outbox/streams.py). The outbox rows are the streams' entries
until retention deletes them (RETENTION_DONE after they were pushed), so what came after
that offset is read from PostgreSQL: on any hub process, after every hub process
restarted, and while the worker is stopped (committed, not yet pushed rows count too).

Each stream gets one outcome:
- "recovered": every entry after the client's offset, up to the stream's offset at the
  read, is here and was built (the events are sent, in offset order);
- "resync": more than RECOVERY_MAX_EVENTS were missed, some are gone (retention), one
  cannot be built any more, or the client claims an offset the stream never reached
  (a database restored from a backup): nothing is sent, the client resyncs over REST;
- "forbidden": the user may not read the stream now (not an active member of the chat,
  or another user's stream): nothing of it is sent.
Authorization is the REST API's, read at the moment of recovery: the chats the domain
port says the user is an active member of.
"""

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from django.db import connection as db

from messenger_realtime.backplane.publisher import layer_message
from messenger_realtime.contracts.build import build_events
from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.exceptions import HubError
from messenger_realtime.outbox.enums import RealtimeTargetKind
from messenger_realtime.outbox.streams import CHAT_PREFIX, USER_PREFIX

RECOVERED, RESYNC, FORBIDDEN = "recovered", "resync", "forbidden"
MAX_STREAMS = 1000  # streams one Recover may name (a user in more chats recovers in parts)
MAX_OFFSET = 2**63 - 1  # a stream's offset is a PostgreSQL bigint
READ_CHUNK = 50  # streams per database read: bounds what one read holds in memory
BUILD_PIECE = 32  # entries built (their domain rows read) at a time
BUILT_PER_SENT = 4  # bytes a Recover may build for each it may send (Allowance)
ENVELOPE = 60  # bytes of an event's frame around its payload and name, about
_SIZE = "_size"  # where a built message keeps its wire_size()
_TARGET_KINDS = {CHAT_PREFIX: RealtimeTargetKind.CHAT_GROUP, USER_PREFIX: RealtimeTargetKind.USER}

# What each asked stream missed, in one statement and so one snapshot: the stream's
# counter (its offset now) and its entries after the client's offset, up to that one, in
# offset order. An entry committed after the snapshot is not read here and is pushed
# live. The LATERAL read is a range scan of ux_rto_stream (target_key, target_kind,
# stream_offset), and it is skipped (the LIMIT never reached) for a stream further behind
# than %(most)s: such a client resyncs, so its entries are not worth reading.
MISSED = """
WITH asked AS (
    SELECT * FROM unnest(%(streams)s::text[], %(kinds)s::text[], %(keys)s::uuid[],
                         %(after)s::bigint[]) AS a(stream, target_kind, target_key, after)
)
SELECT a.stream, s.last_offset, o.stream_offset, o.kind, o.target_kind, o.chat_id,
       o.target_user_id, o.message_id, o.ref_id, o.session_kind, o.seq
FROM asked AS a
LEFT JOIN messenger.realtime_stream AS s ON s.stream = a.stream
LEFT JOIN LATERAL (
    SELECT e.* FROM messenger.realtime_outbox AS e
    WHERE e.target_key = a.target_key AND e.target_kind = a.target_kind
      AND e.stream_offset > a.after AND e.stream_offset <= s.last_offset
      AND s.last_offset - a.after <= %(most)s
    ORDER BY e.stream_offset
    LIMIT %(most)s
) AS o ON true
ORDER BY a.stream, o.stream_offset
"""


class RecoverError(HubError, ValueError):
    """The Recover argument is not what the method takes (the client is told why)."""


class StoredRow(NamedTuple):
    """An entry as MISSED reads it: what the contracts build an event from."""

    stream_offset: int
    kind: str
    target_kind: str
    chat_id: UUID | None
    target_user_id: UUID | None
    message_id: UUID | None
    ref_id: UUID | None
    session_kind: str | None
    seq: int | None


@dataclass(slots=True)
class StreamRecovery:
    """One stream's outcome; `events` (in offset order, as the channel layer would bring
    them: backplane/publisher.py layer_message) only when recovered, `offset` the
    stream's offset at the read."""

    stream: str
    outcome: str
    offset: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


class BuiltEvents:
    """The events recoveries in this process built, shared by the next ones while their
    stream has not moved: after a hub restart a chat's members all recover the same
    entries, and each is then built (and encoded, once per protocol: the message keeps
    its frames) once, not once per member.

    An entry is kept under its stream's last offset at the read: any later event of the
    stream (an edit, a delete, a read receipt) moves that offset, and the next recovery
    builds afresh, so a cached event is never older than what a fresh build would show
    after the events that follow it. At most MAX_AGE seconds old all the same (an entity
    may change without an event of this stream), and at most MAX_EVENTS events in all
    (the least recently used streams go first). Used from the hub's database thread."""

    MAX_AGE = 10.0
    MAX_EVENTS = 50_000

    def __init__(self) -> None:
        # stream -> (its last offset, built at (monotonic), offset -> message or None:
        # an entry that could not be built)
        self._streams: OrderedDict[str, tuple[int, float, dict[int, dict[str, Any] | None]]]
        self._streams = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def take(self, stream: str, last: int) -> dict[int, dict[str, Any] | None]:
        """What is kept of `stream` at its `last` offset (empty when nothing is)."""
        with self._lock:
            kept = self._streams.get(stream)
            if kept is None or kept[0] != last or time.monotonic() - kept[1] > self.MAX_AGE:
                return {}
            self._streams.move_to_end(stream)
            return kept[2]

    def clear(self) -> None:
        with self._lock:
            self._streams.clear()
            self._size = 0

    def keep(self, stream: str, last: int, built: dict[int, dict[str, Any] | None]) -> None:
        with self._lock:
            kept = self._streams.pop(stream, None)
            if kept is not None:
                self._size -= len(kept[2])
                if kept[0] == last:
                    built = {**kept[2], **built}
            self._streams[stream] = (last, time.monotonic(), built)
            self._size += len(built)
            while self._size > self.MAX_EVENTS and self._streams:
                _, (_, _, dropped) = self._streams.popitem(last=False)
                self._size -= len(dropped)


def parse(argument: Any) -> dict[str, int]:
    """The Recover argument: an object mapping stream names to the last offset held."""
    if not isinstance(argument, dict):
        raise RecoverError("Recover takes one object mapping streams to offsets.")
    if len(argument) > MAX_STREAMS:
        raise RecoverError(f"Recover takes at most {MAX_STREAMS} streams at once.")
    asked: dict[str, int] = {}
    for stream, offset in argument.items():
        _stream_key(stream)  # raises for a malformed name
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
            raise RecoverError(
                f"The offset of {stream!r} must be an integer from 0 to {MAX_OFFSET}."
            )
        asked[stream] = offset
    return asked


class Allowance:
    """What one Recover may still take: events (RECOVERY_MAX_EVENTS) and bytes to send
    (RECOVERY_MAX_BYTES, as each event's JSON size), and bytes it may still build from
    the domain, sent or not: BUILT_PER_SENT times the bytes it may send, so a stream too
    large to send is given up a piece past them, a small stream after it may still be
    recovered, and the reading ends however large the streams."""

    __slots__ = ("building", "events", "sending")

    def __init__(self, events: int, sending: int) -> None:
        self.events, self.sending = events, sending
        self.building = BUILT_PER_SENT * sending

    def spent(self) -> bool:
        return self.events <= 0 or self.sending <= 0 or self.building <= 0


def read_missed(
    user_id: UUID,
    asked: Mapping[str, int],
    most: int,
    built: BuiltEvents,
    most_bytes: int = 2**62,
) -> list[StreamRecovery]:
    """Each asked stream's outcome, with its missed events when recovered (synchronous:
    the hub runs it on a thread of its own). At most `most` events and `most_bytes`
    bytes (their JSON) in all, in the order the streams were asked: a stream past them
    is "resync", read no further than it takes to know. `built`: the process's events
    built by earlier recoveries (HubProcess.built), reused and added to."""
    port = get_domain_port()
    chats = port.active_chats(user_id)  # read at recovery, as a REST resync would check
    readable: dict[str, int] = {}
    results: dict[str, StreamRecovery] = {}
    for stream, after in asked.items():
        prefix, key = _stream_key(stream)
        allowed = key == user_id if prefix == USER_PREFIX else key in chats
        if allowed:
            readable[stream] = after
        else:
            results[stream] = StreamRecovery(stream, FORBIDDEN)
    names = list(readable)
    allowance = Allowance(most, most_bytes)
    for start in range(0, len(names), READ_CHUNK):
        chunk = {name: readable[name] for name in names[start : start + READ_CHUNK]}
        recoveries = _unread(chunk) if allowance.spent() else _read(chunk, allowance, port, built)
        for recovery in recoveries:
            results[recovery.stream] = recovery
    return [results[stream] for stream in asked]


def _unread(asked: Mapping[str, int]) -> list[StreamRecovery]:
    """The streams past the call's budget: resync, without a read (their offset unknown,
    which a resync does not need)."""
    return [StreamRecovery(stream, RESYNC) for stream in asked]


def wire_size(message: dict[str, Any]) -> int:
    """About the bytes of an event's frame (its payload's JSON and the envelope's), kept
    on the message: recoveries in this process share built messages (BuiltEvents)."""
    size = message.get(_SIZE)
    if size is None:
        payload = json.dumps(message["payload"], separators=(",", ":"), default=str)
        size = message[_SIZE] = len(payload.encode()) + len(message["event"]) + ENVELOPE
    return int(size)


def _read(
    asked: Mapping[str, int], allowance: Allowance, port: Any, built_before: BuiltEvents
) -> list[StreamRecovery]:
    keys = [_stream_key(stream) for stream in asked]
    params: dict[str, Any] = {
        "streams": list(asked),
        "kinds": [_TARGET_KINDS[prefix] for prefix, _ in keys],
        "keys": [key for _, key in keys],
        "after": list(asked.values()),
        "most": allowance.events,
    }
    with db.cursor() as cursor:
        cursor.execute(MISSED, params)
        found = cursor.fetchall()
    counters: dict[str, int | None] = {}
    entries: dict[str, list[StoredRow]] = {stream: [] for stream in asked}
    for stream, last_offset, *entry in found:
        counters[stream] = last_offset
        if entry[0] is not None:
            entries[stream].append(StoredRow(*entry))
    # The streams whose every missed entry is here may be recovered; the others resync
    # without a read.
    whole: dict[str, list[StoredRow]] = {}
    for stream, after in asked.items():
        missed = (counters.get(stream) or 0) - after  # no counter: the stream never had one
        rows = entries[stream]
        # Every missed offset must be here: after+1 .. last, no more, no fewer.
        if 0 <= missed <= allowance.events and len(rows) == missed:
            whole[stream] = rows
    outcomes: dict[str, StreamRecovery] = {}
    waiting = list(whole)
    while waiting:
        # Streams built together (one domain read per entity type for all of them) while
        # their entries not built before fit in BUILD_PIECE; a longer one alone, in pieces
        # that stop once it is past what the call may send.
        first = waiting.pop(0)
        kept = {first: built_before.take(first, counters.get(first) or 0)}
        todo = [(first, row) for row in _todo(whole[first], kept[first])]
        while waiting and len(todo) < BUILD_PIECE:
            stream = waiting[0]
            kept[stream] = built_before.take(stream, counters.get(stream) or 0)
            more = [(stream, row) for row in _todo(whole[stream], kept[stream])]
            if len(todo) + len(more) > BUILD_PIECE:
                break
            waiting.pop(0)
            todo += more
        if allowance.spent():
            break
        fresh = _build(todo, allowance, port)
        for stream in kept:
            last = counters.get(stream) or 0
            mine = {offset: m for (s, offset), m in fresh.items() if s == stream}
            if mine:
                built_before.keep(stream, last, mine)
            outcomes[stream] = _outcome(
                stream, last, whole[stream], {**kept[stream], **mine}, allowance
            )
    return [
        outcomes.get(stream) or StreamRecovery(stream, RESYNC, counters.get(stream) or 0)
        for stream in asked
    ]


def _todo(rows: list[StoredRow], kept: Mapping[int, Any]) -> list[StoredRow]:
    """The entries no recovery of this process built at the stream's offset."""
    return [row for row in rows if row.stream_offset not in kept]


def _build(
    todo: list[tuple[str, StoredRow]], allowance: Allowance, port: Any
) -> dict[tuple[str, int], dict[str, Any] | None]:
    """(stream, offset) -> the built message (None: it can no longer be built), BUILD_PIECE
    entries at a time; it stops once what it built is past what the call may still send,
    or build (the rest is left unbuilt: their streams resync)."""
    fresh: dict[tuple[str, int], dict[str, Any] | None] = {}
    size = 0
    for start in range(0, len(todo), BUILD_PIECE):
        if start and (size > allowance.sending or allowance.building <= 0):
            break  # past what it may send: nothing more is read
        piece = todo[start : start + BUILD_PIECE]
        events = build_events([row for _, row in piece], port, versions=False)
        for (stream, row), event in zip(piece, events, strict=True):
            message = layer_message(event) if isinstance(event, OutgoingEvent) else None
            fresh[(stream, row.stream_offset)] = message
            if message is not None:
                built = wire_size(message)
                size += built
                allowance.building -= built
    return fresh


def _outcome(
    stream: str,
    last: int,
    rows: list[StoredRow],
    have: dict[int, dict[str, Any] | None],
    allowance: Allowance,
) -> StreamRecovery:
    """One stream's outcome from its built events: recovered when every missed entry was
    built and they fit what the call may still send (taken from it), else resync."""
    events = [have.get(row.stream_offset) for row in rows]
    ready = [event for event in events if event is not None]
    if len(ready) < len(events):  # one can no longer be built, or was left unread
        return StreamRecovery(stream, RESYNC, last)
    size = sum(wire_size(event) for event in ready)
    if size > allowance.sending or len(ready) > allowance.events:
        return StreamRecovery(stream, RESYNC, last)
    allowance.sending -= size
    allowance.events -= len(ready)
    return StreamRecovery(stream, RECOVERED, last, ready)


def _stream_key(stream: Any) -> tuple[str, UUID]:
    """(prefix, id) of a stream name; RecoverError when it is not one."""
    if isinstance(stream, str):
        for prefix in _TARGET_KINDS:
            if stream.startswith(prefix):
                try:
                    key = UUID(stream[len(prefix) :])
                except ValueError:
                    break
                if f"{prefix}{key}" == stream:  # the canonical spelling only
                    return prefix, key
    raise RecoverError(f"{str(stream)[:80]!r} is not a stream (chat:<id> or user:<id>).")
