"""Partitioned runners (DISPATCH_PARTITIONS=K > 1): which rows a partition's leader claims.

A row belongs to the partition of its target (target_key: the chat, or the user), so one
chat's rows always have one leader and per-chat order holds exactly as with one runner.
The partition of a target is a range of a 32-bit hash of target_key:

    target_hash = the first 32 bits of md5(target_key::text), as a signed int4

and partition p of K owns the hashes [lo(p), hi(p)] (K equal slices of the int4 range,
computed here in Python and bound as ::int4). Why these choices:

- md5 is RFC 1321: the same bits on every PostgreSQL version and CPU architecture.
  PostgreSQL's own hashtext()/hashtextextended() are endian-dependent and undocumented
  as stable across major versions; a changed hash would silently move chats between
  partitions (two leaders for one chat during a rolling upgrade) and invalidate the index.
  Only the database computes the hash, so every worker agrees by construction.
- Ranges, not `hash % K`: a range is an index range. ix_rto_pending_partition
  (target_hash, target_key, id) WHERE Pending (migration 0007) lets the walk over a
  partition's targets stay a loose index scan (one probe per target, however many rows a
  foreign burst has), which a modulo filter could not: it would step over every row of
  every other partition's targets.

The walk orders a partition's targets by (target_hash, target_key) instead of target_key;
the claim of the walked targets is WALK_AND_CLAIM's, and the urgent and suspect probes get
the partition's range as an extra filter (their partial indexes hold few rows): the
statements WALK_AND_CLAIM_IN_PARTITION and CLAIM_SUSPECT_IN_PARTITION of queries.sql are
WALK_AND_CLAIM and CLAIM_SUSPECT rendered with the partition's forms of the fragments
IN_PARTITION, WALK_KEY and WALK_ORDER (sql.py), so they cannot drift apart; PARTITION_OF
names a target's partition. K=1 runs the spec's single runner with its own statements.
"""

from dataclasses import dataclass

from messenger_realtime.conf.declared import MAX_DISPATCH_PARTITIONS as MAX_PARTITIONS
from messenger_realtime.dispatch import sql

INT4_MIN, INT4_SPAN = -(2**31), 2**32


def target_hash(column: str) -> str:
    """The partition hash of a uuid expression: queries.sql's TARGET_HASH (its text must
    match migration 0007's index; tests/unit/test_queries.py checks both)."""
    return sql.target_hash(column)


@dataclass(frozen=True)
class Partition:
    """Partition `index` of `count`: the target hashes it owns and its lock's name."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count <= MAX_PARTITIONS:
            raise ValueError(f"partition {self.index} of {self.count}")

    @property
    def lo(self) -> int:
        return _slice_start(self.index, self.count)

    @property
    def hi(self) -> int:
        return _slice_start(self.index + 1, self.count) - 1

    def lock_key(self, base: str) -> str:
        """This partition's LOCK_KEY (its advisory key and lease row are derived from it)."""
        return f"{base}#partition-{self.index}-of-{self.count}"

    def params(self) -> dict[str, int]:
        return {"lo": self.lo, "hi": self.hi}


def _slice_start(index: int, count: int) -> int:
    """The first hash of slice `index`: INT4_MIN + ceil(index * 2**32 / count), so that
    PARTITION_OF's floor((hash - INT4_MIN) * count / 2**32) names the same slice."""
    return INT4_MIN - (-index * INT4_SPAN // count)
