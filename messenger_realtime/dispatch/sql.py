"""The worker's hot-path SQL: the whole statements of queries.sql, each under its name.

queries.sql holds every statement as it runs, with the why of its shape (the index it
rides, the lock it takes, the plan it must keep) in the comment above it. Only store.py
runs them, on the worker's own autocommit psycopg connections.
"""

import re
from pathlib import Path

QUERIES = Path(__file__).with_name("queries.sql")

# Rows whose attempts already reached MAX_ATTEMPTS before this claim never got an outcome
# (the worker died while delivering them, MAX_ATTEMPTS times): the claim quarantines them
# with this error instead of letting a poison row crash the worker forever.
EXHAUSTED_ERROR = "AttemptsExhausted: no outcome recorded within MAX_ATTEMPTS claims"
# What the claims' RETURNING lists (rows.ClaimedRow); WALK_AND_CLAIM's walk columns follow.
CLAIMED_COLUMNS = 15


def load(path: Path = QUERIES) -> dict[str, str]:
    """Each `-- name: X` block's statement: its lines after the block's leading comment,
    up to the `;` that ends it (comments between statements belong to no statement)."""
    parts = re.split(r"^-- name: (\w+)[ \t]*$", path.read_text(), flags=re.M)
    statements: dict[str, str] = {}
    for name, block in zip(parts[1::2], parts[2::2], strict=True):
        lines = block.strip("\n").splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        end = next(i for i, line in enumerate(lines) if line.rstrip().endswith(";"))
        body = "\n".join(lines[: end + 1]).rstrip()
        if name in statements:
            raise ValueError(f"{path.name}: {name} twice")
        statements[name] = body[:-1].rstrip() + "\n"
    return statements


_Q = load()
CLAIM_SESSION = _Q["CLAIM_SESSION"]
WALK_AND_CLAIM = _Q["WALK_AND_CLAIM"]
WALK_AND_CLAIM_IN_PARTITION = _Q["WALK_AND_CLAIM_IN_PARTITION"]
CLAIM_SUSPECT = _Q["CLAIM_SUSPECT"]
CLAIM_SUSPECT_IN_PARTITION = _Q["CLAIM_SUSPECT_IN_PARTITION"]
PARTITION_OF = _Q["PARTITION_OF"]
MARK_DONE = _Q["MARK_DONE"]
MARK_FAILED = _Q["MARK_FAILED"]
MARK_EXPIRED = _Q["MARK_EXPIRED"]
RELEASE = _Q["RELEASE"]
PENDING_STATS = _Q["PENDING_STATS"]
PENDING_ESTIMATE = _Q["PENDING_ESTIMATE"]
QUARANTINED_STATS = _Q["QUARANTINED_STATS"]
RETENTION_BEHIND = _Q["RETENTION_BEHIND"]
DELETE_DONE = _Q["DELETE_DONE"]
