"""queries.sql: every statement whole under its name; the literals it spells out (the
statuses, the urgent kinds, the partition hash) agree with the code that means them,
and the partition statements differ from the single runner's only where they must."""

import importlib
import re
from pathlib import Path

import pytest

from messenger_realtime.dispatch import partitions, sql
from messenger_realtime.outbox.enums import URGENT_KINDS
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status

PARTITION_INDEX = importlib.import_module(
    "messenger_realtime.migrations.0007_partition_index"
).TARGET_HASH
TEXT = sql.QUERIES.read_text()


def test_every_named_statement_is_loaded_and_the_code_names_each_one() -> None:
    names = re.findall(r"^-- name: (\w+)", TEXT, flags=re.M)
    assert set(names) == set(sql.load())
    assert all(getattr(sql, name) == sql.load()[name] for name in names)
    assert all("%(" not in line for line in TEXT.splitlines() if line.startswith("-- name"))


def test_a_name_twice_is_refused(tmp_path: Path) -> None:
    twice = tmp_path / "q.sql"
    twice.write_text("-- name: A\nSELECT 1;\n-- name: A\nSELECT 2;\n")
    with pytest.raises(ValueError, match="A twice"):
        sql.load(twice)


def test_the_literals_are_the_enums() -> None:
    statuses = set(re.findall(r"status = '(\w+)'", TEXT)) | set(re.findall(r"THEN '(\w+)'", TEXT))
    assert statuses <= {s.value for s in Status}
    for statement in (sql.WALK_AND_CLAIM, sql.WALK_AND_CLAIM_IN_PARTITION):
        listed = re.search(r"o\.kind IN \(([^)]*)\)", statement)
        assert listed is not None
        assert re.findall(r"'(\w+)'", listed.group(1)) == [str(k) for k in URGENT_KINDS]


def test_the_partition_hash_is_the_index_expression_everywhere() -> None:
    assert partitions.target_hash("target_key") == PARTITION_INDEX
    hashes = set(
        re.findall(r"\('x' \|\| left\(md5\(\((.*?)\)::text\), 8\)\)::bit\(32\)::int4", TEXT)
    )
    expected = {"target_key", "o.target_key", "walk.key", "step.key"}
    assert hashes == expected | {"%(after)s::uuid", "%(key)s::uuid"}


def _without_range(statement: str) -> str:
    """A partition statement less its hash-range filter, whitespace folded."""
    flat = " ".join(statement.split())
    return flat.replace(
        " AND ('x' || left(md5((o.target_key)::text), 8))::bit(32)::int4"
        " BETWEEN %(lo)s::int4 AND %(hi)s::int4",
        "",
    )


def test_partition_statements_differ_only_in_their_walk_and_range() -> None:
    single = " ".join(sql.WALK_AND_CLAIM.split())
    partition = " ".join(sql.WALK_AND_CLAIM_IN_PARTITION.split())
    cut = "walked AS ("
    assert _without_range(partition).split(cut, 1)[1] == single.split(cut, 1)[1]
    assert _without_range(sql.CLAIM_SUSPECT_IN_PARTITION) == " ".join(sql.CLAIM_SUSPECT.split())
    assert "md5" not in sql.WALK_AND_CLAIM and "md5" not in sql.CLAIM_SUSPECT
