"""Reading a statement's plan: which scans touch the outbox."""

import json
from typing import Any

import psycopg


def outbox_scans(conn: psycopg.Connection[Any], statement: str, params: Any) -> set[str]:
    """The node types that read messenger.realtime_outbox in `statement`'s plan."""
    row = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    found: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "realtime_outbox":
            found.add(node["Node Type"])
        for child in node.get("Plans", []):
            walk(child)

    walk(document[0]["Plan"])
    return found


def walk_probes(conn: psycopg.Connection[Any], statement: str, params: Any) -> int:
    """How many times `statement`, run (EXPLAIN ANALYZE: it claims), stepped to the next
    target: the loops of its index scans whose condition is `target_key > ...`."""
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    probes = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal probes
        if "target_key >" in node.get("Index Cond", ""):
            probes += node.get("Actual Loops", 0)
        for child in node.get("Plans", []):
            walk(child)

    walk(document[0]["Plan"])
    return probes
