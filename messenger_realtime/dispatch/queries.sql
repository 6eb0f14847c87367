-- The worker's SQL: the hot path against messenger.realtime_outbox (store.py runs it)
-- and the lease's statements (lease.py runs them), each under its name. A part that
-- several statements share is a named fragment, written once and included where it is
-- used ({{NAME}}; dispatch/sql.py assembles them and documents the grammar): the claim's
-- update (CLAIM_UPDATE), the claimed row's columns (CLAIMED_ROW), the partition hash
-- (TARGET_HASH). A partition's statement is its single-runner statement rendered with the
-- partition's forms of the fragments that differ ({{WALK_AND_CLAIM in partition}}).
--
-- Parameters are named (%(name)s; %(name)b: an array bound in binary, each uuid's 16
-- bytes instead of its text: ~0.4 ms of CPU per 200-id array, a quarter in binary).
-- Statuses and kinds are written as literals, never bound: the partial indexes
-- (WHERE status = 'Pending', kind IN (...)) serve a statement only if the planner can
-- prove their predicate, which a bound parameter in a prepared statement's generic plan
-- would not let it do. tests/unit/test_queries.py checks the literals against the
-- enums; tests/integration/test_claim_plans.py and test_statement_plans.py EXPLAIN the
-- statements on filled tables. No '%' outside a placeholder: psycopg reads them all.


-- name: CLAIM_SESSION
-- Run once on the claim session when it opens: its planner never takes a sequential
-- scan where an index can serve. The claims' plans otherwise follow the statistics,
-- which lag the churn: planned while the outbox was small (a new deployment, a quiet
-- spell after retention), the walk's probes were sequential scans, and the session kept
-- that plan (psycopg prepares a statement after five runs; its generic plan lives until
-- the next ANALYZE) while the heap filled with Done rows: 14.6 ms of PostgreSQL per
-- claim at 200 msg/s, two thirds of the database's CPU (bench/pg_cost.py --statements).
-- Every statement on this session is one of the claims below.
SET enable_seqscan = off;


-- name: WALK_AND_CLAIM
-- A fair claim of up to %(limit)s due rows that no attempt holds (claimed_at IS NULL),
-- in one round trip and one snapshot, the lease proven in the same statement.
-- walk: the targets (chats, users: target_key) that have Pending rows, in key order
--   (WALK_KEY) from just after the worker's cursor %(after)s, wrapping round once and
--   ending with the cursor's own target: up to %(limit)s of them, each found with one
--   probe of ix_rto_pending_target (a loose index scan), so a target with ten thousand
--   rows costs no more to step over than one with a single row. The worker moves its
--   cursor to the last key, so successive claims take turns over every target. The two
--   OFFSET 0 in the step keep its probe one probe: without them the planner flattened
--   the step and ran the probe again for every use of its key (the key, the wrap test,
--   the cursor test), four index descents per target walked (tests/integration/
--   test_claim_plans.py), a fifth of the claim's time in a backlog over many chats.
-- lease: rows are claimed only while the leader's lease session holds the advisory lock
--   (pg_locks, ~60 us) and the lease row names it (a take-over rewrites the row as it
--   takes the lock); %(lease_pid)s NULL: no lease (--no-lock, benchmarks).
-- fair/topped: an equal quota of each walked target's oldest due rows (id order: a
--   chat's rows in insert order), so one chat's burst cannot hold the others'; targets
--   that filled their quota then fill what the others left, so a burst alone still
--   fills whole batches.
-- urgent: the urgent kinds first (ix_rto_pending_urgent): an invitation never waits
--   behind another target's backlog. A target is a stream whose offsets follow id
--   order, so an urgent row brings the older due rows of its own target with it
--   (urgent_rows, then each one's target up to its newest urgent row, through
--   ix_rto_pending_target): it never goes out ahead of them (issue 60). Weighted, not
--   absolute: at most all but a quarter of the batch, an equal quota of it per urgent
--   target (so one stream's long backlog ahead of its urgent row cannot take another
--   user's invitation's place), the targets in the order of their oldest urgent row and
--   cut there (each target keeps a prefix of its rows), so a flood of them in one chat
--   (a conference's 20,000 ConferenceEnded rows) leaves the last quarter of every batch
--   to the round-robin.
--   Read first, then only the rows kept are locked (urgent).
-- Candidates are locked as they are found (FOR UPDATE SKIP LOCKED in each probe), so a
-- second runner (failover lag, --no-lock) skips them; those not picked are unlocked when
-- the statement ends.
-- claimed: CLAIM_UPDATE (below). age lets the worker drop a time-critical event too old
--   to matter.
-- Every row carries the walk's end (last_key), its size (walked), its keys when nothing
-- was claimed (to walk on: store.claim_fair) and whether the lease held; with nothing
-- claimed, one row of NULL claim columns carries them.
-- IN_PARTITION, WALK_KEY and WALK_ORDER are empty or the key itself here: the single
-- runner's statement is plain SQL once they are in place.
WITH RECURSIVE walk(key, depth, wrapped) AS (
    SELECT coalesce(after.key, first.key), 1, after.key IS NULL
    FROM (SELECT (SELECT target_key FROM messenger.realtime_outbox
                  WHERE status = 'Pending' {{IN_PARTITION(target_key)}}
                    AND {{WALK_KEY(target_key)}} > {{WALK_KEY(%(after)s::uuid)}}
                  ORDER BY {{WALK_ORDER(target_key)}} LIMIT 1) AS key) AS after,
         (SELECT (SELECT target_key FROM messenger.realtime_outbox
                  WHERE status = 'Pending' {{IN_PARTITION(target_key)}}
                  ORDER BY {{WALK_ORDER(target_key)}} LIMIT 1) AS key) AS first
  UNION ALL
    SELECT step.key, walk.depth + 1, step.wrapped
    FROM walk CROSS JOIN LATERAL (
        SELECT coalesce(later.key, first.key) AS key,
               walk.wrapped OR later.key IS NULL AS wrapped
        FROM (SELECT (SELECT target_key FROM messenger.realtime_outbox
                      WHERE status = 'Pending' {{IN_PARTITION(target_key)}}
                        AND {{WALK_KEY(target_key)}} > {{WALK_KEY(walk.key)}}
                      ORDER BY {{WALK_ORDER(target_key)}} LIMIT 1) AS key OFFSET 0) AS later,
             (SELECT (SELECT target_key FROM messenger.realtime_outbox
                      WHERE status = 'Pending' {{IN_PARTITION(target_key)}}
                        AND NOT walk.wrapped
                      ORDER BY {{WALK_ORDER(target_key)}} LIMIT 1) AS key) AS first
        OFFSET 0
    ) AS step
    WHERE walk.depth < %(limit)s AND step.key IS NOT NULL
      AND NOT (step.wrapped AND {{WALK_KEY(step.key)}} > {{WALK_KEY(%(after)s::uuid)}})
),
walked AS (
    SELECT coalesce(array_agg(key ORDER BY depth), '{}') AS keys
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
quota AS (
    SELECT greatest(1, ceil(%(limit)s::numeric
                            / greatest(cardinality((SELECT keys FROM walked)), 1)))::int AS q
),
fair AS (
    SELECT r.id, r.target_key,
           row_number() OVER (PARTITION BY r.target_key ORDER BY r.id) AS rn
    FROM unnest((SELECT keys FROM walked)) AS t(key) CROSS JOIN LATERAL (
        SELECT o.id, o.target_key FROM messenger.realtime_outbox AS o
        WHERE o.target_key = t.key AND o.status = 'Pending' AND o.next_attempt_at <= now()
          AND o.claimed_at IS NULL
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
        WHERE o.target_key = filled.target_key AND o.status = 'Pending'
          AND o.next_attempt_at <= now() AND o.claimed_at IS NULL
          AND o.id > (SELECT f.id FROM fair AS f WHERE f.target_key = filled.target_key
                      ORDER BY f.id DESC LIMIT 1)
        ORDER BY o.id LIMIT greatest(%(limit)s - (SELECT count(*) FROM fair), 0)
        FOR UPDATE SKIP LOCKED
    ) AS r
),
urgent_rows AS (
    SELECT o.id, o.target_key FROM messenger.realtime_outbox AS o
    WHERE o.kind IN ('CallInvited', 'CallCancelled', 'CallMissed', 'CallEnded',
                     'CallDeclined', 'CallAnswered', 'ConferenceInvited',
                     'ConferenceStarted', 'ConferenceEnded')
      AND o.status = 'Pending' AND o.next_attempt_at <= now() AND o.claimed_at IS NULL
      {{IN_PARTITION(o.target_key)}}
    ORDER BY o.id LIMIT %(limit)s - %(limit)s / 4  -- integer division
),
urgent_targets AS (
    SELECT target_key, (array_agg(id ORDER BY id))[1] AS first_urgent,
           (array_agg(id ORDER BY id DESC))[1] AS upto
    FROM urgent_rows GROUP BY target_key
),
urgent_cut AS (
    SELECT ahead.id FROM urgent_targets AS u CROSS JOIN LATERAL (
        SELECT o.id FROM messenger.realtime_outbox AS o
        WHERE o.target_key = u.target_key AND o.status = 'Pending'
          AND o.next_attempt_at <= now() AND o.claimed_at IS NULL AND o.id <= u.upto
        ORDER BY o.id
        LIMIT ceil((%(limit)s - %(limit)s / 4)::numeric
                   / (SELECT count(*) FROM urgent_targets))::int
    ) AS ahead
    ORDER BY u.first_urgent, ahead.id LIMIT %(limit)s - %(limit)s / 4
),
urgent AS (
    SELECT o.id, 0::bigint AS rn
    FROM urgent_cut AS c JOIN messenger.realtime_outbox AS o ON o.id = c.id
    WHERE o.status = 'Pending' AND o.next_attempt_at <= now() AND o.claimed_at IS NULL
    FOR UPDATE OF o SKIP LOCKED
),
due AS (
    SELECT id FROM (
        SELECT id, rn FROM urgent UNION ALL SELECT id, rn FROM fair
        UNION ALL SELECT id, rn FROM topped
    ) AS candidates
    GROUP BY id ORDER BY min(rn), id LIMIT %(limit)s
),
claimed AS (
    {{CLAIM_UPDATE}}
    FROM due
    WHERE o.id = due.id AND (SELECT held FROM lease)
    RETURNING {{CLAIMED_ROW}}
)
SELECT claimed.*,
       walked.keys[cardinality(walked.keys)] AS last_key,
       cardinality(walked.keys) AS walked,
       CASE WHEN claimed.id IS NULL THEN walked.keys END AS keys,
       (SELECT held FROM lease) AS held
FROM walked LEFT JOIN claimed ON true;


-- name: WALK_AND_CLAIM_IN_PARTITION
-- WALK_AND_CLAIM for one partition's leader (DISPATCH_PARTITIONS > 1, partitions.py),
-- rendered with the partition's forms of IN_PARTITION, WALK_KEY and WALK_ORDER: the walk
-- visits the partition's targets only, in (target_hash, target_key) order, each probe
-- one step of ix_rto_pending_partition (PARTITION_INDEX_CREATE) within [%(lo)s, %(hi)s];
-- and the urgent probe keeps to the same range. The fair and topped probes need no
-- filter: they read the walked targets only.
{{WALK_AND_CLAIM in partition}};


-- name: CLAIM_SUSPECT
-- One suspect: a due row whose last attempt never got an outcome (claimed_at still set:
-- its worker died or hung on it), claimed, built and pushed alone, so a row that
-- crashes the worker takes only itself to MAX_ATTEMPTS (ix_rto_pending_claimed). The
-- claim's update is WALK_AND_CLAIM's (CLAIM_UPDATE).
WITH due AS (
    SELECT o.id FROM messenger.realtime_outbox AS o
    WHERE o.status = 'Pending' AND o.next_attempt_at <= now() AND o.claimed_at IS NOT NULL
      {{IN_PARTITION(o.target_key)}}
    ORDER BY o.id LIMIT 1
    FOR UPDATE SKIP LOCKED
)
{{CLAIM_UPDATE}}
FROM due
WHERE o.id = due.id
RETURNING {{CLAIMED_ROW}};


-- name: CLAIM_SUSPECT_IN_PARTITION
-- CLAIM_SUSPECT within one partition's hash range (partitions.py).
{{CLAIM_SUSPECT in partition}};


-- fragment: CLAIM_UPDATE
-- What every claim does to the rows it claims: attempts pre-incremented and
-- next_attempt_at pushed out by the backoff of the new attempt count, on the database
-- clock, so a crash before the outcome means a retry after backoff, never a lost row;
-- jitter drawn per row (random()); claimed_at marks the attempt in flight until its
-- outcome clears it. A row whose attempts already reached %(max_attempts)s never got an
-- outcome that often (the worker kept dying on it): quarantined here instead.
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN o.attempts >= %(max_attempts)s THEN 'Quarantined'
                  ELSE 'Pending' END,
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

-- fragment: CLAIMED_ROW
-- A claimed row as every claim returns it: rows.ClaimedRow's fields, in its order (the
-- rows are built by position; store.py checks the names).
o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id,
o.ref_id, o.session_kind, o.seq, o.status, o.attempts, o.row_version,
o.created_at, extract(epoch FROM now() - o.created_at)::float8 AS age,
o.stream_offset

-- fragment: TARGET_HASH(uuid)
-- A target's partition hash (partitions.py): the first 32 bits of md5 of the uuid's
-- text, as a signed int4. Textually ix_rto_pending_partition's expression (migration
-- 0007 and PARTITION_INDEX_CREATE, over target_key): a probe rides that index only if it
-- spells it the same.
('x' || left(md5(({{uuid}})::text), 8))::bit(32)::int4

-- fragment: IN_PARTITION(uuid)
-- The single runner claims every target: no filter.

-- fragment: IN_PARTITION(uuid) in partition
-- A partition's leader claims only the targets whose hash is in its range.
AND {{TARGET_HASH({{uuid}})}} BETWEEN %(lo)s::int4 AND %(hi)s::int4

-- fragment: WALK_KEY(uuid)
-- A target's place in the single runner's walk: its key (ix_rto_pending_target's order).
{{uuid}}

-- fragment: WALK_KEY(uuid) in partition
-- A target's place in a partition's walk: (its hash, its key), ix_rto_pending_partition's
-- order, compared as a row.
({{TARGET_HASH({{uuid}})}}, {{uuid}})

-- fragment: WALK_ORDER(uuid)
-- The walk's ORDER BY: WALK_KEY's columns, in the index's order.
{{uuid}}

-- fragment: WALK_ORDER(uuid) in partition
{{TARGET_HASH({{uuid}})}}, {{uuid}}


-- name: PARTITION_INDEX_STATE
-- Whether ix_rto_pending_partition exists (NULL: no) and is valid (false: a CONCURRENTLY
-- build that failed or is under way). Only partitioned runners need it, so migration 0011
-- dropped it where none ran: without partitions it cost an md5 and an index entry at
-- every insert and every claim. A partitioned runner creates it as it starts
-- (store.ensure_partition_index).
SELECT (SELECT indisvalid FROM pg_index
        WHERE indexrelid = to_regclass('messenger.ix_rto_pending_partition'));


-- name: PARTITION_INDEX_CREATE
-- The index partitioned runners walk (partitions.py): (target_hash, target_key, id) over
-- the Pending rows, so a partition's walk over its targets is a loose index scan of one
-- hash range. Built CONCURRENTLY: the owners' inserts never wait for it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_rto_pending_partition
    ON messenger.realtime_outbox (({{TARGET_HASH(target_key)}}), target_key, id)
    WHERE status = 'Pending';


-- name: PARTITION_INDEX_DROP
-- An invalid ix_rto_pending_partition (a failed build): dropped before building again.
DROP INDEX CONCURRENTLY IF EXISTS messenger.ix_rto_pending_partition;


-- name: PARTITION_INDEX_TURN
-- One worker builds the index at a time (session lock, tried, never waited for: a build
-- waits for every older transaction, and a session waiting in pg_advisory_lock would be
-- one of them). %(key)s: the LOCK_KEY's advisory key, plus one.
SELECT pg_try_advisory_lock(%(key)s);


-- name: PARTITION_INDEX_TURN_END
SELECT pg_advisory_unlock(%(key)s);


-- name: PARTITION_OF
-- Which partition of %(count)s a target belongs to (tests, operators): the same hash
-- and the same ranges as partitions.Partition (INT4_MIN = -2147483648, 2^32 hashes).
SELECT (({{TARGET_HASH(%(key)s::uuid)}}::int8 - (-2147483648))
        * %(count)s::int8 / 4294967296)::int4;


-- The outcome statements join the batch's (id, row_version) pairs. "o.id = ANY(ids)"
-- lets the planner find the rows through the primary key instead of hashing the whole
-- table (it guesses the unnest's row count badly and picked a sequential scan at 20k
-- rows). The row_version match means an outcome applies only to the claim it belongs
-- to: a row an operator requeued or quarantined meanwhile, or another runner
-- re-claimed, is left alone.

-- name: MARK_DONE
-- Success: Done, last_error cleared; the lag (now - created_at) returned for the SLO.
UPDATE messenger.realtime_outbox AS o SET
    status = 'Done', last_error = NULL, claimed_at = NULL, updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
RETURNING o.id, extract(epoch FROM now() - o.created_at)::float8 AS lag_seconds;


-- name: MARK_FAILED
-- Failure: stays Pending (its next_attempt_at was set by the claim) unless this was
-- attempt MAX_ATTEMPTS or the failure is permanent, then Quarantined; never dropped. A
-- suspect's failure keeps it a suspect (claimed_at stays), retried alone again.
-- isolate (its batch's build failed or timed out) also makes the row due now, retried
-- alone at once, and gives its attempt back (as RELEASE does): it was never tried on its
-- own, so a neighbour's failure cannot bring it to MAX_ATTEMPTS.
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN t.permanent OR (o.attempts >= %(max_attempts)s AND NOT t.isolate)
                  THEN 'Quarantined' ELSE 'Pending' END,
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
  AND o.status = 'Pending'
RETURNING o.id, o.status;


-- name: MARK_EXPIRED
-- Expired: a time-critical event older than its delivery deadline (a ring for a call
-- that ended minutes ago) is not pushed; the row ends Done and says why.
UPDATE messenger.realtime_outbox AS o SET
    status = 'Done', last_error = left(t.error, 512), claimed_at = NULL, updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[], %(errors)b::text[])
     AS t(id, version, error)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
RETURNING o.id;


-- name: RELEASE
-- Graceful stop: rows claimed but never pushed get their attempt back and are due now,
-- so the next runner takes them at once instead of after a backoff.
UPDATE messenger.realtime_outbox AS o SET
    attempts = greatest(o.attempts - 1, 0), next_attempt_at = now(), claimed_at = NULL,
    updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)b::uuid[], %(versions)b::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)b::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
RETURNING o.id;


-- name: PENDING_STATS
-- Backlog gauges, read every STATS_INTERVAL on the leader's loop, so bounded whatever the
-- backlog: Pending rows counted exactly up to %(exact_up_to)s (an index scan of
-- ix_rto_pending_id that stops there; the ORDER BY keeps the planner on that index,
-- where a plain LIMIT let it pick a table scan: a million Pending rows made count(*) a
-- 230 ms parallel sequential scan), and the age of the oldest by id (UUIDv7: insert
-- order; the first entry of the same index, then its row).
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM messenger.realtime_outbox WHERE status = 'Pending'
        ORDER BY id LIMIT %(exact_up_to)s + 1) AS capped),
    coalesce((SELECT extract(epoch FROM now() - created_at) FROM messenger.realtime_outbox
              WHERE status = 'Pending' ORDER BY id LIMIT 1), 0)::float8;


-- name: PENDING_ESTIMATE
-- Past the exact count, the planner's estimate of the Pending rows: the column
-- statistics' share of Pending times the table's current size (which PostgreSQL scales
-- by its pages now, so the estimate follows a growing backlog between ANALYZEs). No
-- rows are read.
EXPLAIN (FORMAT JSON) SELECT 1 FROM messenger.realtime_outbox WHERE status = 'Pending';


-- name: QUARANTINED_STATS
-- Quarantined rows per kind, for the gauge the quarantine alert reads: they stay until
-- requeued, so the alert does too. ix_rto_due (status, next_attempt_at; Pending and
-- Quarantined rows since migration 0011) finds them.
SELECT kind, count(*) FROM messenger.realtime_outbox WHERE status = 'Quarantined'
GROUP BY kind;


-- name: RETENTION_BEHIND
-- How far retention is behind: seconds the oldest Done row is past RETENTION_DONE (0
-- when none is): the first entry of ix_rto_done_updated, one index probe.
SELECT coalesce(greatest(extract(epoch FROM now() - min(updated_at)) - %(older_than)s, 0), 0)
       ::float8
FROM messenger.realtime_outbox WHERE status = 'Done';


-- name: DELETE_DONE
-- Retention: one bounded batch of old Done rows (ix_rto_done_updated), its own short
-- transaction between passes; Pending and Quarantined rows are never deleted.
DELETE FROM messenger.realtime_outbox
WHERE id IN (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = 'Done' AND updated_at < now() - make_interval(secs => %(older_than)s)
    LIMIT %(limit)s
);


-- The lease's statements (lease.py runs them on the lease session): the single-runner
-- lock, the row that names its holder (messenger.realtime_dispatch_lease) and the
-- heartbeat that proves the holder lives. They never touch the outbox; the fair claim
-- proves the lease in its own statement (WALK_AND_CLAIM's lease).

-- name: LEASE_ACQUIRE
-- Take the lock and, in the same statement (so the same commit), name this session as
-- the holder with a fresh heartbeat. The CTE runs pg_try_advisory_lock exactly once (a
-- volatile function keeps it materialised); no row comes back when the lock is busy. The
-- row carries the holder's LOCK_TTL: every worker judges the lease by it
-- (LEASE_STALE_AFTER).
WITH lock AS (SELECT pg_try_advisory_lock(%(key)s) AS held)
INSERT INTO messenger.realtime_dispatch_lease AS l
    (lock_key, holder_pid, holder, partitions, lock_ttl, acquired_at, heartbeat_at)
SELECT %(lock_key)s, pg_backend_pid(), %(holder)s, %(partitions)s, %(ttl)s, now(), now()
FROM lock WHERE lock.held
ON CONFLICT (lock_key) DO UPDATE SET
    holder_pid = excluded.holder_pid, holder = excluded.holder,
    partitions = excluded.partitions, lock_ttl = excluded.lock_ttl,
    acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at
RETURNING l.holder_pid;


-- name: LEASE_ACQUIRE_TURN
-- Acquisitions of one LOCK_KEY's leases, whatever their partition count, one at a time
-- (a transaction lock, before LEASE_OTHER_COUNT and LEASE_ACQUIRE): two workers of
-- different counts cannot both find the other absent and both lead. Tried, never waited
-- for: a session frozen inside its acquisition must not hang the others (false: stand
-- by, poll again).
SELECT pg_try_advisory_xact_lock(%(turn)s);


-- name: LEASE_OTHER_COUNT
-- A live lease of this LOCK_KEY with another partition count (a rolling change of
-- DISPATCH_PARTITIONS): this worker must not lead beside it. Stale ones are deleted
-- first, as a standby of their own count would end their holder: a holder that resumes
-- then finds its lease gone at its next heartbeat, before it claims or pushes (Leader).
WITH stale AS (
    DELETE FROM messenger.realtime_dispatch_lease
    WHERE {{LEASE_OF_OTHER_COUNT}} AND NOT {{LEASE_FRESH}}
)
SELECT {{LEASE_COUNT}}, holder FROM messenger.realtime_dispatch_lease
WHERE {{LEASE_OF_OTHER_COUNT}} AND {{LEASE_FRESH}}
ORDER BY heartbeat_at DESC LIMIT 1;


-- name: LEASE_HEARTBEAT
-- Only the session named as holder can stamp: no row back means the lease was taken over.
UPDATE messenger.realtime_dispatch_lease SET heartbeat_at = now()
WHERE lock_key = %(lock_key)s AND holder_pid = pg_backend_pid()
RETURNING holder_pid;


-- name: LEASE_RELEASE
-- Graceful exit: drop the lease row and the lock, so a standby leads at its next poll.
WITH gone AS (
    DELETE FROM messenger.realtime_dispatch_lease
    WHERE lock_key = %(lock_key)s AND holder_pid = pg_backend_pid()
)
SELECT pg_advisory_unlock(%(key)s);


-- name: LEASE_HOLDER
-- Who holds the lock in this database (a bigint advisory key shows in pg_locks as
-- classid = high 32 bits, objid = low 32 bits, objsubid = 1), and what the lease says.
-- Exclusive holders only: partitioned leaders hold the single-runner key *shared* (their
-- guard, runner.py), which a single runner must wait for, never end.
SELECT l.pid, lease.holder_pid, lease.holder,
       extract(epoch FROM now() - lease.heartbeat_at)::float8, coalesce(lease.lock_ttl, %(ttl)s)
FROM pg_locks AS l
LEFT JOIN messenger.realtime_dispatch_lease AS lease ON lease.lock_key = %(lock_key)s
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.mode = 'ExclusiveLock'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (%(key)s >> 32) & 4294967295
  AND l.objid::bigint = %(key)s & 4294967295;


-- name: LEASE_LOCKED
-- The re-check under the row lock: a heartbeat committing meanwhile waits for this
-- transaction and then finds its session gone, or it committed first and we see it fresh.
SELECT holder_pid, extract(epoch FROM now() - heartbeat_at)::float8, {{LEASE_STALE_AFTER}}
FROM messenger.realtime_dispatch_lease WHERE lock_key = %(lock_key)s
FOR UPDATE;


-- name: LEASE_TERMINATE
-- End a stale holder's session (which frees its lock), waiting up to %(wait_ms)s for it.
SELECT pg_terminate_backend(%(pid)s, %(wait_ms)s);


-- name: LEASE_GUARD
-- A partition leader's guard: the single-runner key in share mode, held for its session.
-- Partition leaders share it; a single runner (DISPATCH_PARTITIONS=1) holds it
-- exclusively. So the two schemes never lead at once (a half-done switch of
-- DISPATCH_PARTITIONS waits instead of running two leaders for one chat).
SELECT pg_try_advisory_lock_shared(%(guard)s);


-- fragment: LEASE_COUNT
-- The partition count of a lease row: the column (migration 0008), else what an older
-- worker's LOCK_KEY says (LOCK_KEY#partition-i-of-K), else a single runner's 1.
coalesce(partitions, (regexp_match(lock_key, '#partition-\d+-of-(\d+)$'))[1]::int, 1)

-- fragment: LEASE_OF_OTHER_COUNT
-- A lease row of this LOCK_KEY (%(base)s), whatever its partition count, whose count is
-- not %(partitions)s.
(lock_key = %(base)s OR starts_with(lock_key, %(base)s || '#partition-'))
AND {{LEASE_COUNT}} <> %(partitions)s

-- fragment: LEASE_STALE_AFTER
-- A lease is stale once its heartbeat is older than its *holder's* LOCK_TTL (it stamps
-- every third of that), whatever the reader's: with mismatched settings a short-TTL
-- standby would otherwise end a live leader. NULL: a holder from before migration 0009,
-- judged by the reader's own LOCK_TTL.
coalesce(lock_ttl, %(ttl)s)

-- fragment: LEASE_FRESH
-- The lease row's heartbeat is recent enough to be its holder's (LEASE_STALE_AFTER).
heartbeat_at >= now() - make_interval(secs => {{LEASE_STALE_AFTER}})
