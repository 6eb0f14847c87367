"""The worker's hot-path SQL against messenger.realtime_outbox, named, with the why.

Run only by store.py, on the worker's own autocommit psycopg connections. Status values
come from RealtimeOutboxStatus but are written into the text as literals, not bound as
parameters: the partial index ix_rto_pending_id (WHERE status = 'Pending') serves the
claim only if the planner can prove the predicate, which a bound parameter in a prepared
statement's generic plan would not let it do.
"""

from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status

PENDING, DONE, QUARANTINED = (
    f"'{s.value}'" for s in (Status.PENDING, Status.DONE, Status.QUARANTINED)
)

# Rows whose attempts already reached MAX_ATTEMPTS before this claim never got an outcome
# (the worker died while delivering them, MAX_ATTEMPTS times): quarantine them at claim
# instead of letting a poison row crash the worker forever.
EXHAUSTED_ERROR = "AttemptsExhausted: no outcome recorded within MAX_ATTEMPTS claims"

# Claim up to %(limit)s due rows in insert (UUIDv7) order. The status filter is the
# cursor (never "id > last seen": v7 order is insert order, not commit order). SKIP LOCKED
# keeps a second runner (failover lag, --no-lock) on disjoint rows. Attempts are
# pre-incremented and next_attempt_at pushed out by the backoff for the new attempt
# count, all on the database clock: a crash before the outcome means a retry after
# backoff, never a lost row. Jitter is drawn per row (random()), so rows that fail
# together do not come due together. The partial index ix_rto_pending_id serves ORDER BY.
CLAIM = f"""
WITH due AS (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = {PENDING} AND next_attempt_at <= now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN o.attempts >= %(max_attempts)s THEN {QUARANTINED} ELSE {PENDING} END,
    last_error = CASE WHEN o.attempts >= %(max_attempts)s THEN %(exhausted)s
                      ELSE o.last_error END,
    attempts = CASE WHEN o.attempts >= %(max_attempts)s THEN o.attempts
                    ELSE o.attempts + 1 END,
    next_attempt_at = now() + make_interval(secs =>
        (%(delays)s::float8[])[LEAST(o.attempts + 1, cardinality(%(delays)s::float8[]))]
        * (1.0 - %(jitter)s::float8 * random())),
    updated_at = now(),
    row_version = o.row_version + 1
FROM due
WHERE o.id = due.id
RETURNING o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id,
          o.ref_id, o.session_kind, o.seq, o.status, o.attempts, o.row_version,
          o.created_at
"""

# The outcome statements below join the batch's (id, row_version) pairs; "o.id = ANY(ids)"
# lets the planner find the rows through the primary key instead of hashing the whole
# table (it guesses the unnest's row count badly and picked a sequential scan at 20k rows).
# The row_version match means an outcome applies only to the claim it belongs to: a row an
# operator requeued or quarantined meanwhile, or another runner re-claimed, is left alone.

# Success: Done, last_error cleared; lag (now - created_at) returned for the SLO metric.
MARK_DONE = f"""
UPDATE messenger.realtime_outbox AS o SET
    status = {DONE}, last_error = NULL, updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id, extract(epoch FROM now() - o.created_at)::float8 AS lag_seconds
"""

# Failure: stays Pending (next_attempt_at was already set by the claim) unless this was
# attempt MAX_ATTEMPTS or the failure is permanent, then Quarantined. Never dropped.
MARK_FAILED = f"""
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN t.permanent OR o.attempts >= %(max_attempts)s
                  THEN {QUARANTINED} ELSE {PENDING} END,
    last_error = left(t.error, 512), updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[], %(errors)s::text[],
            %(permanent)s::bool[]) AS t(id, version, error, permanent)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id, o.status
"""

# Graceful stop: rows claimed but never pushed get their attempt back and are due now,
# so the next runner takes them at once instead of after a backoff.
RELEASE = f"""
UPDATE messenger.realtime_outbox AS o SET
    attempts = greatest(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = {PENDING}
RETURNING o.id
"""

# Backlog gauges: count and oldest age of Pending rows (the partial index serves it).
PENDING_STATS = f"""
SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM messenger.realtime_outbox WHERE status = {PENDING}
"""

# Quarantined rows per kind, for the gauge the quarantine alert reads: they stay until
# requeued, so the alert does too. ix_rto_due (status, next_attempt_at) finds them.
QUARANTINED_STATS = f"""
SELECT kind, count(*) FROM messenger.realtime_outbox WHERE status = {QUARANTINED} GROUP BY kind
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
