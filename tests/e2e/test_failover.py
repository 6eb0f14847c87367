"""Failovers under traffic (issue 60), end to end: the soak's topology and checker
(bench/chaos.py --failover) with its two Daphnes, two workers, owners posting over REST
and 40 clients listening (a quarter of them the official @microsoft/signalr client
under Node, the rest raw hub clients that Recover), while the servers fail over:

- PostgreSQL: the primary frozen (SIGSTOP to each of its processes: a host gone silent,
  its connections open and unanswered, for 30 s), its synchronous streaming standby
  promoted with pg_ctl promote; every process names both in one multi-host
  DATABASE_URL (target_session_attrs=read-write), the standby first;
- Redis: the master frozen the same way, its replica promoted by three redis-server
  Sentinels; every process names the Sentinels (redis+sentinel://) for the channel
  layer and for the per-user bounds.

The crashed variants (connections reset) alternate with these in the soak's longer runs
(docs/reliability.md, "Failover").

One run holds both (a failover each, 1.5 minutes); each engine's test reads its part.
Before (47f6a94): the PostgreSQL run stopped at the start, the worker on the standby
(ReadOnlySqlTransaction); the Redis run never started, its URLs refused (E024, E026).
"""

from typing import Any

import pytest

from tests.support.chaos import chaos_run

# The soak's run: servers, 40 clients, 1.5 minutes of traffic, two failovers, the drain.
# Its checker found the urgent claims' reordering (a CallInvited pushed before the
# ChatUpdated committed before it on the same user stream, once a failover's backlog
# put both in one batch): disorder 1 in about one run in three, before urgency became a
# target's (store.push_order, WALK_AND_CLAIM's urgent probe).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]
RESUME_LIMIT = 30.0  # s from the promotion or the Sentinels' switch (issue 60's target)


@pytest.fixture(scope="module")
def failover_run() -> tuple[int, dict[str, Any], str]:
    return chaos_run(
        "--failover", "--minutes", "1.5", "--clients", "40", "--seed", "60",
        "--faults", "postgres_failover,redis_failover", timeout=420,
    )  # fmt: skip


def assert_nothing_lost_but_what_replication_had_not_sent(result: dict[str, Any]) -> None:
    violations = {k: result[k] for k in ("lost", "silent", "foreign", "disorder")}
    named = str({"violations": result["violations"], "faults": result["faults"]})
    assert violations == {"lost": 0, "silent": 0, "foreign": 0, "disorder": 0}, named[:6000]
    assert result["drain"]["seconds"] is not None and result["drain"]["quarantined"] == 0
    # Synchronous replication: every message whose POST was answered is still there.
    # (Asynchronous, --async-replication: the tail the standby had not got is lost with
    # its domain rows; docs/reliability.md, "Failover", measures it.)
    assert result["replication"] == "synchronous"
    assert result["acknowledged_then_lost"]["messages"] == 0


@pytest.mark.parametrize(
    ("kind", "how"), [("postgres_failover", "frozen"), ("redis_failover", "frozen")]
)
def test_delivery_resumes_after_a_failover_and_nothing_committed_is_lost(
    failover_run: tuple[int, dict[str, Any], str], kind: str, how: str
) -> None:
    status, result, stderr = failover_run
    (fault,) = [f for f in result["faults"] if f["kind"] == kind]
    assert fault["detail"].startswith(how), fault
    assert result["resumed_after_switch_seconds"][kind] <= RESUME_LIMIT, result
    assert result["messages"] > 100 and result["deliveries"] > result["messages"]
    assert result["clients"]["connected_at_start"] == 40
    assert_nothing_lost_but_what_replication_had_not_sent(result)
    assert status == 0, stderr[-3000:]
