"""Dispatch leaders in tests: Leaders opened by a test (closed after it: the `leaders`
fixture), and which partitions' advisory locks are held, read from pg_locks."""

from collections.abc import Iterator

import pytest
from django.db import connection

from messenger_realtime.dispatch.lease import Leader, advisory_key
from messenger_realtime.dispatch.partitions import Partition
from tests.support.runtime import run

LOCK_KEY = "job:scheduled:messenger-realtime-dispatch"  # the default LOCK_KEY
TTL = 30.0  # the default LOCK_TTL
UNSIGNED = 0xFFFFFFFFFFFFFFFF  # a 64-bit key as pg_locks shows it (two unsigned halves)


@pytest.fixture
def leaders() -> Iterator[list[Leader]]:
    """Leaders a test opens (open_leader); each is closed (its lease given back) after it."""
    opened: list[Leader] = []
    yield opened
    for leader in opened:
        run(leader.close())


async def open_leader(opened: list[Leader], index: int, count: int, ttl: float = TTL) -> Leader:
    """Partition `index` of `count`'s Leader, connected (count 1: the single runner)."""
    if count == 1:
        made = Leader(LOCK_KEY, ttl)
    else:
        made = Leader(Partition(index, count).lock_key(LOCK_KEY), ttl, guard_key=LOCK_KEY)
    await made.connect()
    opened.append(made)
    return made


def exclusive_advisory_locks() -> dict[int, int]:
    """Advisory locks held exclusively in this database: key -> backend pid, the key as
    its unsigned 64 bits (compare `advisory_key(...) & UNSIGNED`).

    pg_locks shows a bigint key as its high and low 32 bits (classid, objid), each an
    unsigned oid, so a negative key's high half reads 2^31 or more: joined here as the
    unsigned bits, never compared with the signed key as it is.
    """
    with connection.cursor() as cur:
        cur.execute(
            "SELECT classid::bigint, objid::bigint, pid FROM pg_locks"
            " WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND mode = 'ExclusiveLock'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return {(high << 32) | low: pid for high, low, pid in cur.fetchall()}


def partition_leaders(count: int, lock_key: str = LOCK_KEY) -> dict[int, int]:
    """partition -> the backend pid holding its lock (exclusively), for those held."""
    held = exclusive_advisory_locks()
    keys = [advisory_key(Partition(i, count).lock_key(lock_key)) & UNSIGNED for i in range(count)]
    return {index: held[key] for index, key in enumerate(keys) if key in held}
