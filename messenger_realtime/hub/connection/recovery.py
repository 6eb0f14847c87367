"""The `Recover` hub method on a connection: what the client missed is read from the
database (hub/recovery.py) and sent before the completion; live events of the streams it
recovers wait meanwhile and follow (the rules are StreamMarks', marks.py)."""

import logging
import time
from typing import Any

from messenger_realtime.hub.connection.events import encode, event_frame
from messenger_realtime.hub.connection.marks import StreamMarks
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.recovery import RECOVERED, StreamRecovery, parse, read_missed
from messenger_realtime.ops import metrics

logger = logging.getLogger(__name__)
_read_missed = hub_read(read_missed)


async def recover(connection: Connection, argument: Any) -> dict[str, str]:
    """The `Recover` hub method: send what the client missed on each stream it names
    (hub/recovery.py), then answer each stream's outcome. RecoverError for a malformed
    argument (the caller answers it as a HubException)."""
    started = time.perf_counter()
    asked = parse(argument)
    marks = connection.marks
    if marks is None:
        marks = connection.marks = StreamMarks()
    for stream in asked:  # from here, live events of these streams wait
        marks.held.setdefault(stream, [])
    # Frames an event delivery built before the hold go out before any recovered one.
    await connection.outbound.flush()
    sent = 0
    try:
        options = connection.options
        results = await _read_missed(connection.user_id, asked, options.recovery_max_events)
        for result in results:
            sent += await _send(connection, marks, result)
    finally:
        for stream in asked:
            await _release(connection, marks, stream)
        marks.sent = None  # the notes are for the first recovery only
    outcomes = {result.stream: result.outcome for result in results}
    elapsed = time.perf_counter() - started
    _report(connection, outcomes, sent, elapsed)
    return outcomes


async def _send(connection: Connection, marks: StreamMarks, result: StreamRecovery) -> int:
    """The recovered events of one stream, in offset order, but those sent live."""
    if result.outcome != RECOVERED:
        return 0
    already = marks.sent_live(result.stream)
    frames = [
        encode(connection, message)
        for message in result.events
        if message["payload"].get("offset") not in already
    ]
    await connection.outbound.emit_many(frames)
    marks.recovered[result.stream] = max(marks.recovered.get(result.stream, 0), result.offset)
    return len(frames)


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
