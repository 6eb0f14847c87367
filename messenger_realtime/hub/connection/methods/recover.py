"""The `Recover` hub method on a connection: what the client missed is read from the
database (hub/recovery.py) and sent before the completion; live events of the streams it
recovers wait meanwhile and follow (the rules are StreamMarks', marks.py).

What one call may cost is bounded: at most RECOVERY_MAX_EVENTS events and
RECOVERY_MAX_BYTES bytes (or half the send bound if less, so a recovery never overflows
a drained connection), sent in messages of at most SEND_CHUNK bytes so the send bound is
checked as they go; a stream that does not fit is answered "resync" (the client reloads
it over REST instead of reconnecting and recovering it again). A call costs READ_UNITS
(3) and one more per STREAMS_PER_UNIT streams it names, before it runs, and then by what
it sent (one more per EVENTS_PER_CHARGE events and per BYTES_PER_CHARGE bytes), of its
connection's budget and of the user's invocation rate limit.
A connection runs its invocations one at a time, so one Recover is in flight per
connection, and a user's recoveries read one at a time per process, on a thread of
their own, never ahead of the reads other users' connects make."""

import time
from collections.abc import Iterable
from typing import Any

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub.connection.layer_messages import encode, event_frame
from messenger_realtime.hub.connection.marks import StreamMarks
from messenger_realtime.hub.connection.methods import Billed, Cost, hub_method, length_of_first
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.recovery import (
    RECOVERED,
    RESYNC,
    StreamRecovery,
    parse,
)
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
SEND_CHUNK = 64 * 1024  # bytes per message of recovered events (Twisted's own threshold)
# What a Recover costs beyond its own invocation: one more per 10 events and one more per
# 16 KiB it sent (bench/one_user.py: at one per 10 events alone, one user recovering 25
# large messages a call drew 45 MB a minute from the hub).
EVENTS_PER_CHARGE = 10
BYTES_PER_CHARGE = 16 * 1024
STREAMS_PER_UNIT = 25  # streams named per unit, before the read (a read takes 50 at a time)
READ_UNITS = 3  # a call's own: the chats the user may read, and the missed entries' read


@hub_method(
    "Recover",
    cost=Cost(call=READ_UNITS, per_items=STREAMS_PER_UNIT, items=length_of_first, shared=True),
)
async def recover(connection: Connection, argument: Any) -> Billed:
    """The `Recover` hub method: send what the client missed on each stream it names
    (hub/recovery.py), then answer each stream's outcome. RecoverError (a HubError) for a
    malformed argument: the client is told what is wrong. `argument`: one object, stream
    -> the last offset the client holds."""
    started = time.perf_counter()
    asked = parse(argument)
    marks = connection.stream_marks()
    sent = size = 0
    options = connection.options
    most_bytes = min(options.recovery_max_bytes, options.send_buffer_limit // 2)
    outcomes: dict[str, str] = {}
    try:
        for stream in asked:  # from here, live events of these streams wait
            marks.held.setdefault(stream, [])
        # Frames an event delivery built before the hold go out before any recovered one.
        await connection.outbound.flush()
        # One at a time per user, on its process's thread for recoveries (HubProcess).
        hub = connection.hub
        async with hub.recovering(connection.user_id):
            results = await hub.read_missed(
                connection.user_id, asked, options.recovery_max_events, most_bytes
            )
        for result in results:
            frames = _frames(connection, marks, result)
            bytes_ = sum(_size(frame) for frame in frames)
            if size + bytes_ > most_bytes:  # does not fit: the client reloads it over REST
                outcomes[result.stream] = RESYNC
                continue
            await _send(connection, frames)
            marks.recovered[result.stream] = max(
                marks.recovered.get(result.stream, 0), result.offset
            )
            outcomes[result.stream] = result.outcome
            sent, size = sent + len(frames), size + bytes_
    finally:
        await _release_all(connection, marks, asked)
        marks.sent = None  # the notes are for the first recovery only
    if connection.closing:  # the release ended it: no charge, nothing reported
        return Billed(outcomes, 0)
    elapsed = time.perf_counter() - started
    _report(connection, outcomes, sent, elapsed)
    return Billed(outcomes, sent // EVENTS_PER_CHARGE + size // BYTES_PER_CHARGE)


def _frames(connection: Connection, marks: StreamMarks, result: StreamRecovery) -> list[Frame]:
    """The recovered events of one stream, in offset order, but those sent live."""
    if result.outcome != RECOVERED:
        return []
    already = marks.sent_live(result.stream)
    return [
        encode(connection, message)
        for message in result.events
        if message["payload"].get("offset") not in already
    ]


async def _send(connection: Connection, frames: list[Frame]) -> None:
    """In messages of at most SEND_CHUNK bytes (one event may be larger): the server's
    send bound is checked before each, not once for all of them."""
    chunk: list[Frame] = []
    size = 0
    for frame in frames:
        if chunk and size + _size(frame) > SEND_CHUNK:
            await connection.outbound.emit_many(chunk)
            chunk, size = [], 0
        chunk.append(frame)
        size += _size(frame)
    await connection.outbound.emit_many(chunk)


def _size(frame: Frame) -> int:
    """A frame's bytes on the wire (JSON is text: UTF-8)."""
    if isinstance(frame, bytes) or frame.isascii():
        return len(frame)
    return len(frame.encode())


async def _release_all(connection: Connection, marks: StreamMarks, streams: Iterable[str]) -> None:
    """Release every stream the call held. A held event is checked again as it goes out
    (layer_messages.event_frame: a membership read); a check that fails (the database
    failing over) ends the connection with allowReconnect rather than leave its stream,
    and those after it, held: their later live events would be kept from a client never
    told. Reconnected, the client recovers from what it holds."""
    streams = list(streams)
    try:
        for stream in streams:
            await _release(connection, marks, stream)
    except BaseException as exc:  # a cancellation too: nothing may stay held
        for stream in streams:
            marks.held.pop(stream, None)
        how = ending.dropped(ending.RELEASE_FAILED)
        if not isinstance(exc, Exception):
            connection.end_soon(how)  # in a task of its own: this one is going away
            raise
        logger.warning(
            "recovery release failed",
            extra={**connection.ids(), "action": "recover", Field.ERROR_CODE: describe_error(exc)},
        )
        await connection.end(how)


async def _release(connection: Connection, marks: StreamMarks, stream: str) -> None:
    """Send the live events held while `stream` was recovered, in their order; more
    that arrive meanwhile are held too, until none is left."""
    while True:
        held = marks.held.get(stream)
        if not held:
            marks.held.pop(stream, None)  # no await since the check: nothing slips by
            return
        marks.held[stream] = []
        upto = marks.recovered.get(stream, 0)
        frames = []
        for message in held:
            if message["payload"]["offset"] <= upto:
                continue  # the recovery sent it
            frame = await event_frame(connection, message, hold=False)
            if frame is not None:
                frames.append(frame)
        if connection.closing:
            return
        await connection.outbound.emit_many(frames)


def _report(connection: Connection, outcomes: dict[str, str], sent: int, elapsed: float) -> None:
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    for outcome, count in counts.items():
        metrics.hub_recoveries.labels(outcome=outcome).inc(count)
    metrics.hub_recovered_events.inc(sent)
    metrics.hub_recovery_duration.observe(elapsed)
    logger.info(
        "recovered",
        extra={
            **connection.ids(),
            "action": "recover",
            "streams": len(outcomes),
            "events": sent,
            **{f"streams_{outcome}": count for outcome, count in sorted(counts.items())},
            "duration_ms": round(elapsed * 1000, 1),
        },
    )
