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
the claim of the walked targets is sql.WALK_AND_CLAIM's (WALK_AND_CLAIM_IN_PARTITION), and
the urgent and suspect probes get the
partition's range as an extra filter (their partial indexes hold few rows). K=1 runs the
spec's single runner with the unchanged statements of sql.py.
"""

from dataclasses import dataclass

from messenger_realtime.conf.declared import MAX_DISPATCH_PARTITIONS as MAX_PARTITIONS
from messenger_realtime.dispatch import sql

INT4_MIN, INT4_SPAN = -(2**31), 2**32


def target_hash(column: str) -> str:
    """The partition hash of a uuid expression (the text must match migration 0007's index)."""
    return f"('x' || left(md5(({column})::text), 8))::bit(32)::int4"


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


_HASH = target_hash("target_key")
_IN_RANGE = f"{_HASH} BETWEEN %(lo)s::int4 AND %(hi)s::int4"
_PROBE = f"SELECT target_key FROM messenger.realtime_outbox WHERE status = {sql.PENDING}"
_PROBE += f" AND {_IN_RANGE}"
_FIRST = f"ORDER BY {_HASH}, target_key LIMIT 1"


def _after(key: str) -> str:
    """Row comparison on the index's leading columns: the targets after `key`'s place."""
    return f"({_HASH}, target_key) > ({target_hash(key)}, {key})"


# WALK (sql.py) within one partition, in (target_hash, target_key) order: the
# same loose index scan, wrapping once and ending with the cursor's own target, on
# ix_rto_pending_partition instead of ix_rto_pending_target.
PARTITION_WALK = f"""walk(key, depth, wrapped) AS (
    SELECT coalesce(after.key, first.key), 1, after.key IS NULL
    FROM (SELECT ({_PROBE} AND {_after("%(after)s::uuid")} {_FIRST}) AS key) AS after,
         (SELECT ({_PROBE} {_FIRST}) AS key) AS first
  UNION ALL
    SELECT step.key, walk.depth + 1, step.wrapped
    FROM walk CROSS JOIN LATERAL (
        SELECT coalesce(later.key, first.key) AS key, walk.wrapped OR later.key IS NULL AS wrapped
        FROM (SELECT ({_PROBE} AND {_after("walk.key")} {_FIRST}) AS key) AS later,
             (SELECT ({_PROBE} AND NOT walk.wrapped {_FIRST}) AS key) AS first
    ) AS step
    WHERE walk.depth < %(limit)s AND step.key IS NOT NULL
      AND NOT (step.wrapped AND ({target_hash("step.key")}, step.key)
                                > ({target_hash("%(after)s::uuid")}, %(after)s::uuid))
)"""

_ROW_IN_RANGE = f"\n      AND {target_hash('o.target_key')} BETWEEN %(lo)s::int4 AND %(hi)s::int4"
CLAIM_SUSPECT_IN_PARTITION = sql.suspect_statement(_ROW_IN_RANGE)
WALK_AND_CLAIM_IN_PARTITION = sql.walk_and_claim_statement(PARTITION_WALK, _ROW_IN_RANGE)

# Which partition a target belongs to (tests, operators): the same hash and ranges.
PARTITION_OF = f"""
SELECT (({target_hash("%(key)s::uuid")}::int8 - ({INT4_MIN})) * %(count)s::int8
        / {INT4_SPAN})::int4
"""
