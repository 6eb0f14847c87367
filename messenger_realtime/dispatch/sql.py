"""The worker's SQL: the statements of queries.sql, each under its name, assembled from
the named fragments they include.

queries.sql holds every statement with the why of its shape (the index it rides, the
lock it takes, the plan it must keep) in the comment above it. A part that several
statements share (the claim's UPDATE, the claimed row's columns, the partition hash) is
a fragment written once, and a partitioned variant is its statement rendered with the
partition's forms of the fragments that differ, so the variants cannot drift apart. The
grammar, kept this small on purpose:

    -- name: NAME                 a statement: the lines after its leading comment, up
                                  to the line that ends with ';'
    -- fragment: NAME             a piece of SQL: the lines after its leading comment,
    -- fragment: NAME(param)      up to the first blank line (none: an empty piece);
                                  {{param}} in it is the argument it is given
    -- fragment: NAME in VARIANT  NAME's form in VARIANT (falls back to NAME's own)
    {{NAME}}, {{NAME(argument)}}  the fragment (or statement) NAME, in place;
    {{NAME in VARIANT}}           with VARIANT's forms of the fragments it includes

An included piece's later lines are indented to where it starts, so a rendered statement
reads well in pg_stat_statements and EXPLAIN. Only store.py and lease.py run them, on the
worker's own autocommit psycopg connections.
"""

import re
from pathlib import Path

QUERIES = Path(__file__).with_name("queries.sql")

# Rows whose attempts already reached MAX_ATTEMPTS before this claim never got an outcome
# (the worker died while delivering them, MAX_ATTEMPTS times): the claim quarantines them
# with this error instead of letting a poison row crash the worker forever.
EXHAUSTED_ERROR = "AttemptsExhausted: no outcome recorded within MAX_ATTEMPTS claims"

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)(?:\((\w+)\))?(?: in (\w+))?[ \t]*$", re.M)
_INCLUDE = re.compile(r"\{\{(\w+)(?:\((.*?)\))?(?: in (\w+))?\}\}")


class Queries:
    """queries.sql's statements and fragments, rendered on demand."""

    def __init__(self, path: Path = QUERIES) -> None:
        self.path = path
        self.names: list[str] = []  # the statements, in file order
        # (name, variant or None) -> (its parameter or None, its text)
        self.pieces: dict[tuple[str, str | None], tuple[str | None, str]] = {}
        parts = _BLOCK.split(path.read_text())
        for i in range(1, len(parts), 5):
            kind, name, param, variant, block = parts[i : i + 5]
            if (name, variant) in self.pieces:
                raise ValueError(f"{path.name}: {name} twice")
            statement = kind == "name"
            if statement:
                self.names.append(name)
            self.pieces[name, variant] = (param, _body(block, statement))

    def statements(self) -> dict[str, str]:
        """Every named statement, rendered (less the lines an empty fragment left blank)."""
        return {
            name: re.sub(r"\n[ \t]+(?=\n)", "", self.render(name)) + "\n" for name in self.names
        }

    def render(self, name: str, argument: str | None = None, variant: str | None = None) -> str:
        """Statement or fragment `name` with its includes in place (in `variant`)."""
        param, text = self.pieces.get((name, variant)) or self.pieces[name, None]
        if (param is None) != (argument is None):
            raise ValueError(f"{self.path.name}: {name} takes {param or 'no argument'}")
        if param is not None and argument is not None:
            text = text.replace("{{" + param + "}}", argument)
        return _INCLUDE.sub(lambda m: self._include(m, variant), text)

    def _include(self, match: re.Match[str], variant: str | None) -> str:
        name, argument, inner = match.groups()
        text = self.render(name, argument, inner or variant)
        column = match.start() - match.string.rfind("\n", 0, match.start()) - 1
        return text.replace("\n", "\n" + " " * column)


def _body(block: str, statement: bool) -> str:
    """A block's SQL: its lines after the leading comment; a statement's up to its ';'
    (without it), a fragment's up to the first blank line."""
    lines = block.strip("\n").splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    if statement:
        end = next(i for i, line in enumerate(lines) if line.rstrip().endswith(";"))
        return "\n".join(lines[: end + 1]).rstrip()[:-1].rstrip()
    end = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    return "\n".join(lines[:end]).rstrip()


def load(path: Path = QUERIES) -> dict[str, str]:
    """Each `-- name: X` statement of `path`, rendered."""
    return Queries(path).statements()


QUERIES_SQL = Queries()
_Q = QUERIES_SQL.statements()
CLAIM_SESSION = _Q["CLAIM_SESSION"]
WALK_AND_CLAIM = _Q["WALK_AND_CLAIM"]
WALK_AND_CLAIM_IN_PARTITION = _Q["WALK_AND_CLAIM_IN_PARTITION"]
CLAIM_SUSPECT = _Q["CLAIM_SUSPECT"]
CLAIM_SUSPECT_IN_PARTITION = _Q["CLAIM_SUSPECT_IN_PARTITION"]
PARTITION_OF = _Q["PARTITION_OF"]
PARTITION_INDEX_STATE = _Q["PARTITION_INDEX_STATE"]
PARTITION_INDEX_CREATE = _Q["PARTITION_INDEX_CREATE"]
PARTITION_INDEX_DROP = _Q["PARTITION_INDEX_DROP"]
PARTITION_INDEX_TURN = _Q["PARTITION_INDEX_TURN"]
PARTITION_INDEX_TURN_END = _Q["PARTITION_INDEX_TURN_END"]
MARK_DONE = _Q["MARK_DONE"]
MARK_FAILED = _Q["MARK_FAILED"]
MARK_EXPIRED = _Q["MARK_EXPIRED"]
RELEASE = _Q["RELEASE"]
PENDING_STATS = _Q["PENDING_STATS"]
PENDING_ESTIMATE = _Q["PENDING_ESTIMATE"]
QUARANTINED_STATS = _Q["QUARANTINED_STATS"]
RETENTION_BEHIND = _Q["RETENTION_BEHIND"]
DELETE_DONE = _Q["DELETE_DONE"]
LEASE_ACQUIRE = _Q["LEASE_ACQUIRE"]
LEASE_ACQUIRE_TURN = _Q["LEASE_ACQUIRE_TURN"]
LEASE_OTHER_COUNT = _Q["LEASE_OTHER_COUNT"]
LEASE_HEARTBEAT = _Q["LEASE_HEARTBEAT"]
LEASE_RELEASE = _Q["LEASE_RELEASE"]
LEASE_HOLDER = _Q["LEASE_HOLDER"]
LEASE_LOCKED = _Q["LEASE_LOCKED"]
LEASE_TERMINATE = _Q["LEASE_TERMINATE"]
LEASE_GUARD = _Q["LEASE_GUARD"]

# The claimed row's columns (the CLAIMED_ROW fragment: rows.ClaimedRow's fields, in that
# order, checked where the rows are built); WALK_AND_CLAIM's walk columns follow them.
CLAIMED_ROW = QUERIES_SQL.render("CLAIMED_ROW")
CLAIMED_NAMES = tuple(
    re.sub(r".*\b(?:AS |o\.)(\w+)$", r"\1", column.strip())
    for column in re.split(r",\s*(?![^()]*\))", CLAIMED_ROW)
)
CLAIMED_COLUMNS = len(CLAIMED_NAMES)


def target_hash(column: str) -> str:
    """The partition hash of a uuid expression (the TARGET_HASH fragment)."""
    return QUERIES_SQL.render("TARGET_HASH", column)
