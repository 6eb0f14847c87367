"""Streams: every event pushed to a hub group is also a numbered entry of that group's
stream, so a client that was away asks for what came after the offset it holds
(hub/recovery.py) instead of resyncing over REST.

A stream is named as its group is (`chat:{ChatId}`, `user:{UserId}`). Its offsets are
1, 2, 3, ... in commit order with no gaps: enqueue_many() takes the next ones from the
stream's counter row in messenger.realtime_stream, in the owner's transaction, and the
row lock it takes there is held to the commit. Writers of one stream therefore commit
one after the other, as writers of one chat already do for the chat's `last_seq`; writers
of different streams never wait for each other. A transaction that writes to several
streams locks their counters in name order (one statement), so two such transactions
cannot deadlock on them.

The outbox rows are the stream's entries (stream_offset); retention deletes Done rows
after RETENTION_DONE, which is therefore the recovery horizon.
"""

from collections import Counter
from collections.abc import Iterable, Mapping
from uuid import UUID

from django.db import connections

from messenger_realtime.outbox.enums import RealtimeTargetKind

CHAT_PREFIX = "chat:"
USER_PREFIX = "user:"

# Takes `n` offsets from each stream's counter, creating the counter at its first event.
# INSERT ... ON CONFLICT locks each counter row it touches until the commit; the rows are
# fed in name order, so every transaction locks several streams in the same order.
# RETURNING gives the last offset taken; the intents get last-n+1 .. last, in their order.
NEXT_OFFSETS = """
INSERT INTO messenger.realtime_stream AS s (stream, last_offset)
SELECT stream, n FROM unnest(%(streams)s::text[], %(counts)s::bigint[]) AS t(stream, n)
ORDER BY stream
ON CONFLICT (stream) DO UPDATE SET last_offset = s.last_offset + EXCLUDED.last_offset
RETURNING stream, last_offset
"""

# The streams' current offsets (0 for a stream with no event yet): what a REST payload
# tells a client it stands at. Primary-key lookups.
CURRENT_OFFSETS = """
SELECT stream, last_offset FROM messenger.realtime_stream WHERE stream = ANY(%(streams)s::text[])
"""


def stream_name(target_kind: str, chat_id: UUID | None, target_user_id: UUID | None) -> str:
    """The stream (and hub group) an intent goes to: chat:{ChatId} or user:{UserId}."""
    if target_kind == RealtimeTargetKind.USER:
        return f"{USER_PREFIX}{target_user_id}"
    return f"{CHAT_PREFIX}{chat_id}"


def chat_stream(chat_id: UUID) -> str:
    return f"{CHAT_PREFIX}{chat_id}"


def user_stream(user_id: UUID) -> str:
    return f"{USER_PREFIX}{user_id}"


def take_offsets(streams: list[str], using: str = "default") -> list[int]:
    """The next offset of each stream in `streams` (one per intent, in order), taken in
    the current transaction: one round trip whatever the number of streams."""
    counts = Counter(streams)
    names = sorted(counts)
    with connections[using].cursor() as cursor:
        cursor.execute(NEXT_OFFSETS, {"streams": names, "counts": [counts[s] for s in names]})
        last = dict(cursor.fetchall())
    # Hand out each stream's block last-n+1 .. last in the intents' order.
    following = {name: last[name] - counts[name] for name in names}
    offsets = []
    for name in streams:
        following[name] += 1
        offsets.append(following[name])
    return offsets


def current_offsets(streams: Iterable[str], using: str = "default") -> Mapping[str, int]:
    """Each stream's last committed offset (0 when it has none yet)."""
    names = list(dict.fromkeys(streams))
    if not names:
        return {}
    with connections[using].cursor() as cursor:
        cursor.execute(CURRENT_OFFSETS, {"streams": names})
        found = dict(cursor.fetchall())
    return {name: found.get(name, 0) for name in names}
