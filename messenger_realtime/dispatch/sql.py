"""The worker's hot-path SQL against messenger.realtime_outbox, named, with the why.

Run only by store.py, on the worker's own autocommit psycopg connections. Status values
come from RealtimeOutboxStatus but are written into the text as literals, not bound as
parameters: the partial index ix_rto_pending_id (WHERE status = 'Pending') serves the
claim only if the planner can prove the predicate, which a bound parameter in a prepared
statement's generic plan would not let it do.

Array parameters are bound in binary (`%(name)b`): psycopg sends each uuid's 16 bytes
instead of formatting its text (~0.4 ms of CPU per 200-id array; a quarter in binary).
"""

from messenger_realtime.outbox.enums import URGENT_KINDS
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status

PENDING, DONE, QUARANTINED = (
    f"'{s.value}'" for s in (Status.PENDING, Status.DONE, Status.QUARANTINED)
)

# Rows whose attempts already reached MAX_ATTEMPTS before this claim never got an outcome
# (the worker died while delivering them, MAX_ATTEMPTS times): quarantine them at claim
# instead of letting a poison row crash the worker forever.
EXHAUSTED_ERROR = "AttemptsExhausted: no outcome recorded within MAX_ATTEMPTS claims"


# Every claim ends with the same update: attempts are pre-incremented and next_attempt_at
# pushed out by the backoff for the new attempt count, all on the database clock, so a
# crash before the outcome means a retry after backoff, never a lost row. Jitter is drawn
# per row (random()), so rows that fail together do not come due together. claimed_at
# marks the attempt in flight until its outcome clears it. Rows whose attempts already
# reached MAX_ATTEMPTS are quarantined here instead. `age` (now - created_at, database
# clock) lets the worker drop a time-critical event that is too old to matter.
def _claimed(guard: str = "") -> str:
    """The claim's UPDATE of the rows in `due`; `guard`: an extra condition on each."""
    return f"""
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN o.attempts >= %(max_attempts)s THEN {QUARANTINED} ELSE {PENDING} END,
    last_error = CASE WHEN o.attempts >= %(max_attempts)s THEN %(exhausted)s
                      ELSE o.last_error END,
    attempts = CASE WHEN o.attempts >= %(max_attempts)s THEN o.attempts
                    ELSE o.attempts + 1 END,
    next_attempt_at = now() + make_interval(secs =>
        (%(delays)s::float8[])[LEAST(o.attempts + 1, cardinality(%(delays)s::float8[]))]
        * (1.0 - %(jitter)s::float8 * random())),
    claimed_at = CASE WHEN o.attempts >= %(max_attempts)s THEN NULL ELSE now() END,
    updated_at = now(),
    row_version = o.row_version + 1
FROM due
WHERE o.id = due.id{guard}
RETURNING o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id,
          o.ref_id, o.session_kind, o.seq, o.status, o.attempts, o.row_version,
          o.created_at, extract(epoch FROM now() - o.created_at)::float8 AS age,
          o.stream_offset
"""


_CLAIMED = _claimed()
CLAIMED_COLUMNS = 15  # what its RETURNING lists (rows.ClaimedRow)

_DUE = f"o.status = {PENDING} AND o.next_attempt_at <= now()"
_URGENT = ", ".join(f"'{kind}'" for kind in URGENT_KINDS)

# One probe of ix_rto_pending_target: the smallest target key with a Pending row (uuid
# has no min() aggregate before PostgreSQL 16, and ORDER BY ... LIMIT 1 is the same probe).
_NEXT_TARGET = f"SELECT target_key FROM messenger.realtime_outbox WHERE status = {PENDING}"
_FIRST = "ORDER BY target_key LIMIT 1"

# The targets (chats, users) that have Pending rows, in key order from just after the
# worker's cursor, wrapping round once and ending with the cursor's own target (a burst
# next to a quiet chat is walked every time, so batches stay full): up to %(limit)s of
# them, each found with one probe of ix_rto_pending_target (a loose index scan), so a
# target with ten thousand rows costs no more to step over than one with a single row.
# The worker moves its cursor to the last key, so successive claims take turns over every
# target.
WALK = f"""walk(key, depth, wrapped) AS (
    SELECT coalesce(after.key, first.key), 1, after.key IS NULL
    FROM (SELECT ({_NEXT_TARGET} AND target_key > %(after)s::uuid {_FIRST}) AS key) AS after,
         (SELECT ({_NEXT_TARGET} {_FIRST}) AS key) AS first
  UNION ALL
    SELECT step.key, walk.depth + 1, step.wrapped
    FROM walk CROSS JOIN LATERAL (
        SELECT coalesce(later.key, first.key) AS key, walk.wrapped OR later.key IS NULL AS wrapped
        FROM (SELECT ({_NEXT_TARGET} AND target_key > walk.key {_FIRST}) AS key) AS later,
             (SELECT ({_NEXT_TARGET} AND NOT walk.wrapped {_FIRST}) AS key) AS first
    ) AS step
    WHERE walk.depth < %(limit)s AND step.key IS NOT NULL
      AND NOT (step.wrapped AND step.key > %(after)s::uuid)
)"""


# A fair claim of up to %(limit)s due rows that no attempt holds (claimed_at IS NULL):
# - urgent kinds first (ix_rto_pending_urgent): an invitation never waits behind a
#   backlog. Weighted, not absolute: they take at most all but a quarter of the batch
#   (rounded down), so a flood of them in one chat (a conference's 20,000 ConferenceEnded
#   rows) leaves every batch's last quarter to the round-robin below and cannot hold the
#   other chats' rows until it has drained; alone, the flood still fills whole batches
#   (its target tops them up);
# - then round-robin over the walked targets: each target's oldest rows, an equal quota
#   each, so one chat's burst cannot hold the other chats' rows; targets that filled their
#   quota then fill what the others left, so a burst alone still fills whole batches;
# - within a target, always its oldest rows: a chat's rows are claimed in id (insert) order.
# Candidates are locked as they are found (FOR UPDATE SKIP LOCKED in each probe), so a
# second runner (failover lag, --no-lock) skips them and takes the next ones instead;
# candidates not picked are unlocked when the statement ends.
def _fair_ctes(in_partition: str, targets: str) -> str:
    """The fair claim's CTEs, up to `due`, over the `targets` array expression; its urgent
    probe limited by `in_partition` (partitions.py; empty: all)."""
    return f"""quota AS (
    SELECT greatest(1, ceil(%(limit)s::numeric
                            / greatest(cardinality({targets}), 1)))::int AS q
),
fair AS (
    SELECT r.id, r.target_key,
           row_number() OVER (PARTITION BY r.target_key ORDER BY r.id) AS rn
    FROM unnest({targets}) AS t(key) CROSS JOIN LATERAL (
        SELECT o.id, o.target_key FROM messenger.realtime_outbox AS o
        WHERE o.target_key = t.key AND {_DUE} AND o.claimed_at IS NULL
        ORDER BY o.id LIMIT (SELECT q FROM quota)
        FOR UPDATE SKIP LOCKED
    ) AS r
),
filled AS (
    SELECT target_key FROM fair GROUP BY target_key
    HAVING count(*) >= (SELECT q FROM quota)
),
topped AS (
    SELECT r.id, (SELECT q FROM quota)
                 + row_number() OVER (PARTITION BY r.target_key ORDER BY r.id) AS rn
    FROM filled CROSS JOIN LATERAL (
        SELECT o.id, o.target_key FROM messenger.realtime_outbox AS o
        WHERE o.target_key = filled.target_key AND {_DUE} AND o.claimed_at IS NULL
          AND o.id > (SELECT f.id FROM fair AS f WHERE f.target_key = filled.target_key
                      ORDER BY f.id DESC LIMIT 1)
        ORDER BY o.id LIMIT greatest(%(limit)s - (SELECT count(*) FROM fair), 0)
        FOR UPDATE SKIP LOCKED
    ) AS r
),
urgent AS (
    SELECT o.id, 0::bigint AS rn FROM messenger.realtime_outbox AS o
    WHERE o.kind IN ({_URGENT}) AND {_DUE} AND o.claimed_at IS NULL{in_partition}
    ORDER BY o.id LIMIT %(limit)s - %(limit)s / 4  -- integer division
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT id FROM (
        SELECT id, rn FROM urgent UNION ALL SELECT id, rn FROM fair
        UNION ALL SELECT id, rn FROM topped
    ) AS candidates
    GROUP BY id ORDER BY min(rn), id LIMIT %(limit)s
)"""


# WALK and CLAIM in one round trip and snapshot, with the lease proof in it instead of a
# heartbeat round trip first: rows are claimed only while the leader's lease session holds
# the advisory lock (pg_locks: ~60 us here) and the lease row names it (a take-over
# rewrites the row as it takes the lock). %(lease_pid)s NULL: no lease (--no-lock). One
# trailer row (id NULL) says where the walk ended, how many targets it walked, which ones
# when it claimed nothing (to walk on: store.claim_fair) and whether the lease held.
def walk_and_claim_statement(walk: str, in_partition: str = "") -> str:
    """WALK_AND_CLAIM over `walk` (WALK, or a partition's), urgent rows by `in_partition`."""
    return f"""
WITH RECURSIVE {walk},
walked AS (
    SELECT coalesce(array_agg(key ORDER BY depth), '{{}}') AS keys
    FROM walk WHERE key IS NOT NULL
),
lease AS (
    SELECT %(lease_pid)s::int IS NULL OR (EXISTS (
        SELECT FROM messenger.realtime_dispatch_lease
        WHERE lock_key = %(lease_key)s AND holder_pid = %(lease_pid)s::int
    ) AND EXISTS (
        SELECT FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = %(lease_pid)s::int
          AND classid = %(lease_classid)s::oid AND objid = %(lease_objid)s::oid
    )) AS held
),
{_fair_ctes(in_partition, "(SELECT keys FROM walked)")},
claimed AS ({_claimed(" AND (SELECT held FROM lease)")})
SELECT *, NULL::uuid AS last_key, NULL::int AS walked, NULL::uuid[] AS keys, NULL::bool AS held
FROM claimed
UNION ALL
SELECT {", ".join(["NULL"] * CLAIMED_COLUMNS)}, keys[cardinality(keys)], cardinality(keys),
       CASE WHEN NOT EXISTS (SELECT FROM claimed) THEN keys END, (SELECT held FROM lease)
FROM walked
"""


WALK_AND_CLAIM = walk_and_claim_statement(WALK)

# The claim session's planner never takes a sequential scan where an index can serve.
# The claims' plans otherwise follow the table's statistics, which lag the churn: planned
# while the outbox was small (a new deployment, a quiet spell after retention), the
# walk's probes were sequential scans, and the session kept that plan (psycopg prepares
# a statement after five runs; its generic plan lives until the next ANALYZE) while the
# heap filled with Done rows: 14.6 ms of PostgreSQL per claim at 200 msg/s, two thirds of
# the database's CPU (bench/pg_cost.py --statements). Every statement on this session is
# a claim below, each meant as index probes (tests/integration/test_claim_plans.py
# EXPLAINs them on a small table and a filled one).
CLAIM_SESSION = "SET enable_seqscan = off"


# One suspect: a due row whose last attempt never got an outcome (claimed_at still set:
# its worker died or hung on it). Claimed, built and pushed alone, so a row that crashes
# the worker takes only itself to MAX_ATTEMPTS (ix_rto_pending_claimed).
def suspect_statement(in_partition: str = "") -> str:
    """CLAIM_SUSPECT limited by `in_partition` (partitions.py; empty: all)."""
    return f"""
WITH due AS (
    SELECT o.id FROM messenger.realtime_outbox AS o
    WHERE {_DUE} AND o.claimed_at IS NOT NULL{in_partition}
    ORDER BY o.id LIMIT 1
    FOR UPDATE SKIP LOCKED
)
{_CLAIMED}"""


CLAIM_SUSPECT = suspect_statement()

# The outcome statements below join the batch's (id, row_version) pairs; "o.id = ANY(ids)"
# lets the planner find the rows through the primary key instead of hashing the whole
# table (it guesses the unnest's row count badly and picked a sequential scan at 20k rows).
# The row_version match means an outcome applies only to the claim it belongs to: a row an
# operator requeued or quarantined meanwhile, or another runner re-claimed, is left alone.

# Success: Done, last_error cleared; lag (now - created_at) returned for the SLO metric.
MARK_DONE = f"""
UPDATE messenger.realtime_outbox AS o SET
    status = {DONE}, last_error = NULL, claimed_at = NULL, updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id, extract(epoch FROM now() - o.created_at)::float8 AS lag_seconds
"""

# Failure: stays Pending (next_attempt_at was already set by the claim) unless this was
# attempt MAX_ATTEMPTS or the failure is permanent, then Quarantined. Never dropped.
# A suspect's failure keeps it a suspect (claimed_at stays), so it is retried alone again;
# `isolate` (a batch whose build failed or timed out) also makes the row due now, to be
# retried alone at once, so the one row that broke the build holds up nobody else. An
# isolated row gets its attempt back (as RELEASE does): it was never tried on its own, so
# a neighbour's failure cannot bring it to MAX_ATTEMPTS; only its own tries alone count.
MARK_FAILED = f"""
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN t.permanent OR (o.attempts >= %(max_attempts)s AND NOT t.isolate)
                  THEN {QUARANTINED} ELSE {PENDING} END,
    attempts = CASE WHEN t.isolate THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,
    last_error = left(t.error, 512),
    claimed_at = CASE WHEN t.suspect AND NOT t.permanent
                           AND (o.attempts < %(max_attempts)s OR t.isolate)
                      THEN o.claimed_at ELSE NULL END,
    next_attempt_at = CASE WHEN t.isolate THEN now() ELSE o.next_attempt_at END,
    updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[], %(errors)b::text[],
            %(permanent)b::bool[], %(suspect)b::bool[], %(isolate)b::bool[])
     AS t(id, version, error, permanent, suspect, isolate)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id, o.status
"""

# Expired: a time-critical event older than its delivery deadline (a ring for a call that
# ended minutes ago) is not pushed; the row ends Done and says why.
MARK_EXPIRED = f"""
UPDATE messenger.realtime_outbox AS o SET
    status = {DONE}, last_error = left(t.error, 512), claimed_at = NULL, updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[], %(errors)b::text[])
     AS t(id, version, error)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id
"""

# Graceful stop: rows claimed but never pushed get their attempt back and are due now,
# so the next runner takes them at once instead of after a backoff.
RELEASE = f"""
UPDATE messenger.realtime_outbox AS o SET
    attempts = greatest(o.attempts - 1, 0), next_attempt_at = now(), claimed_at = NULL,
    updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id
"""

# Backlog gauges, read every STATS_INTERVAL on the leader's loop, so bounded whatever the
# backlog: Pending rows counted exactly up to %(exact_up_to)s (an index scan of
# ix_rto_pending_id that stops there; the ORDER BY keeps the planner on that index, where
# a plain LIMIT let it pick a table scan: a million Pending rows made count(*) a 230 ms
# parallel sequential scan), and the age of the oldest by id (UUIDv7: insert order; the
# first entry of the same index, then its row).
PENDING_STATS = f"""
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM messenger.realtime_outbox WHERE status = {PENDING}
        ORDER BY id LIMIT %(exact_up_to)s + 1) AS capped),
    coalesce((SELECT extract(epoch FROM now() - created_at) FROM messenger.realtime_outbox
              WHERE status = {PENDING} ORDER BY id LIMIT 1), 0)::float8
"""

# Past the exact count, the planner's estimate of the Pending rows: the column statistics'
# share of Pending times the table's current size (which PostgreSQL scales by its pages
# now, so the estimate follows a growing backlog between ANALYZEs). No rows are read.
PENDING_ESTIMATE = f"""
EXPLAIN (FORMAT JSON) SELECT 1 FROM messenger.realtime_outbox WHERE status = {PENDING}
"""

# Quarantined rows per kind, for the gauge the quarantine alert reads: they stay until
# requeued, so the alert does too. ix_rto_due (status, next_attempt_at) finds them.
QUARANTINED_STATS = f"""
SELECT kind, count(*) FROM messenger.realtime_outbox WHERE status = {QUARANTINED} GROUP BY kind
"""

# How far retention is behind: seconds the oldest Done row is past RETENTION_DONE (0 when
# none is): the first entry of ix_rto_done_updated, one index probe.
RETENTION_BEHIND = f"""
SELECT coalesce(greatest(extract(epoch FROM now() - min(updated_at)) - %(older_than)s, 0), 0)
       ::float8
FROM messenger.realtime_outbox WHERE status = {DONE}
"""

# Retention: one bounded batch of old Done rows (ix_rto_done_updated); Pending and
# Quarantined rows are never deleted.
DELETE_DONE = f"""
DELETE FROM messenger.realtime_outbox
WHERE id IN (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = {DONE} AND updated_at < now() - make_interval(secs => %(older_than)s)
    LIMIT %(limit)s
)
"""
