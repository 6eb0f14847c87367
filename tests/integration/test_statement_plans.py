"""Every hot-path statement of the worker is an index path on a day's table (issue 32):
EXPLAINed on 200,000 analysed rows (mostly Done, some Pending, a few Quarantined) in a
plain session. A sequential scan of messenger.realtime_outbox fails the test. (The
claims run on a session that refuses sequential scans: test_claim_plans.py.)"""

import uuid

import psycopg
import pytest

from messenger_realtime.dispatch import sql
from messenger_realtime.dispatch.connections import conninfo
from tests.support.plans import outbox_scans

pytestmark = pytest.mark.usefixtures("transactional_db")

FILL = """
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, seq, status,
    attempts, updated_at)
SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup',
       (%(chats)s::uuid[])[1 + g %% cardinality(%(chats)s::uuid[])], g,
       CASE WHEN g %% 20 = 0 THEN 'Quarantined' WHEN g %% 7 = 0 THEN 'Pending' ELSE 'Done' END,
       1, now() - make_interval(secs => g)
FROM generate_series(1, 200000) AS g
"""


def test_each_statement_of_the_worker_is_an_index_path_on_a_days_table() -> None:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(FILL, {"chats": [uuid.uuid4() for _ in range(500)]})
        conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
        pending = conn.execute(
            "SELECT id, row_version FROM messenger.realtime_outbox WHERE status = 'Pending'"
            " LIMIT 200"
        ).fetchall()
        ids, versions = [r[0] for r in pending], [r[1] for r in pending]
        n = len(ids)
        keys = {"ids": ids, "versions": versions}
        statements = {
            "MARK_DONE": (sql.MARK_DONE, keys),
            "MARK_FAILED": (
                sql.MARK_FAILED,
                {
                    **keys,
                    "errors": ["x"] * n,
                    "permanent": [False] * n,
                    "suspect": [False] * n,
                    "isolate": [False] * n,
                    "max_attempts": 8,
                },
            ),
            "MARK_EXPIRED": (sql.MARK_EXPIRED, {**keys, "errors": ["x"] * n}),
            "RELEASE": (sql.RELEASE, keys),
            "PENDING_STATS": (sql.PENDING_STATS, {"exact_up_to": 10_000}),
            "QUARANTINED_STATS": (sql.QUARANTINED_STATS, {}),
            "RETENTION_BEHIND": (sql.RETENTION_BEHIND, {"older_than": 86_400.0}),
            "DELETE_DONE": (sql.DELETE_DONE, {"older_than": 86_400.0, "limit": 1000}),
        }
        for name, (statement, params) in statements.items():
            scans = outbox_scans(conn, statement, params)
            assert scans and "Seq Scan" not in scans, (name, scans)
