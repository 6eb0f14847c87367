"""The worker's one owner of claiming: the claim session, the fair claim's cursor, and the
lease proof every claim carries.

A pass (batches.py) asks its Claimer for a fair batch (`fair`) or for one suspect
(`suspect`); it never learns which statement ran, on which session, from which cursor,
or how the lease was proven. The Claimer picks the variant (one partition's, or the single
runner's: partitions.py) and store.py runs it. A new claim variant is its statement in
queries.sql (for a variant of a claim there, the fragments that differ: sql.py), a function
in store.py that runs it, and a method here.
"""

import time
from typing import Any

import psycopg

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.lease import Leader
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.dispatch.rows import RowOutcome
from messenger_realtime.dispatch.store import NO_TARGET, ClaimShape

Conn = psycopg.AsyncConnection[Any]


class Claimer:
    """Claims for one worker (or one partition's leader).

    Owns the claim session (its own connection, so claims run ahead of the pushes and
    outcomes: batches.py) and the cursor fair claims take turns over targets from.

    Args:
        shape: how much a claim takes and the backoff it schedules.
        alias: the Django database alias whose connection settings the session uses.
        session: extra connection settings (a partition's application_name).
        partition: claim this partition's rows only (None: every row).
        leader: the lease each claim must prove (None: no lease, --no-lock).
    """

    def __init__(
        self,
        shape: ClaimShape,
        alias: str = "default",
        *,
        session: dict[str, str] | None = None,
        partition: Partition | None = None,
        leader: Leader | None = None,
    ) -> None:
        self.shape = shape
        self.alias = alias
        self.session = session or {}
        self.partition = partition
        self.leader = leader
        self.cursor = NO_TARGET  # the last target walked: the next fair claim starts after it
        self.conn: Conn | None = None

    async def connection(self) -> Conn:
        """The claim session, opened (and its plans pinned: sql.CLAIM_SESSION) if need be."""
        if self.conn is None or self.conn.closed:
            self.conn = await db.connect(self.alias, **self.session)
            await store.prepare_claim_session(self.conn)
        return self.conn

    async def fair(self) -> list[RowOutcome]:
        """A fair batch (store.claim_fair), proving the lease in the same statement: no
        heartbeat round trip first; LeadershipLost once the lease is gone."""
        conn = await self.connection()
        lease = self.leader.lease_proof() if self.leader is not None else None
        sent = time.monotonic()
        outcomes, self.cursor = await store.claim_fair(
            conn, self.shape, self.cursor, self.partition, lease
        )
        if self.leader is not None:
            self.leader.proven(sent)
        return outcomes

    async def suspect(self) -> list[RowOutcome]:
        """One suspect (store.claim_suspect), after a heartbeat proves the lease: the
        suspect's statement does not prove it itself."""
        conn = await self.connection()
        if self.leader is not None:
            await self.leader.ensure_held()
        return await store.claim_suspect(conn, self.shape, self.partition)

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            await conn.close()
