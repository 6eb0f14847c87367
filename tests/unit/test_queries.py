"""queries.sql: every statement under its name, its shared parts written once; the
literals it spells out (the statuses, the urgent kinds, the partition hash) agree with
the code that means them, and the partition statements differ from the single runner's
only where they must."""

import importlib
import re
from pathlib import Path

import pytest

from messenger_realtime.dispatch import partitions, sql
from messenger_realtime.dispatch.rows import ClaimedRow
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
    spelled = r"\('x' \|\| left\(md5\(\((.*?)\)::text\), 8\)\)::bit\(32\)::int4"
    assert re.findall(spelled, TEXT) == ["{{uuid}}"]  # written once: TARGET_HASH
    hashes = {
        column for statement in sql.load().values() for column in re.findall(spelled, statement)
    }
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


def test_every_claim_updates_once_with_the_one_claim_update() -> None:
    claims = ("WALK_AND_CLAIM", "WALK_AND_CLAIM_IN_PARTITION", "CLAIM_SUSPECT")
    update = "UPDATE messenger.realtime_outbox AS o SET"
    assert TEXT.count(update) == 1 + 4  # CLAIM_UPDATE, and MARK_DONE/FAILED/EXPIRED, RELEASE
    for name in (*claims, "CLAIM_SUSPECT_IN_PARTITION"):
        statement = getattr(sql, name)
        assert statement.count(update) == 1
        assert statement.count(sql.CLAIMED_ROW.splitlines()[0]) == 1


def test_the_claimed_row_is_the_claims_returning_list() -> None:
    assert ClaimedRow._fields == sql.CLAIMED_NAMES
    assert len(ClaimedRow._fields) == sql.CLAIMED_COLUMNS


def test_an_included_fragment_is_indented_and_its_argument_put_in_place(tmp_path: Path) -> None:
    path = tmp_path / "q.sql"
    path.write_text(
        "-- name: A\nSELECT {{LIST(t)}}\nFROM t{{WHERE}};\n\n"
        "-- name: B\n{{A in other}};\n\n"
        "-- fragment: LIST(table)\n-- why\n{{table}}.a,\n{{table}}.b\n\n"
        "-- fragment: WHERE\n\n"
        "-- fragment: WHERE in other\n WHERE t.a > 0\n"
    )
    assert sql.load(path) == {
        "A": "SELECT t.a,\n       t.b\nFROM t\n",
        "B": "SELECT t.a,\n       t.b\nFROM t WHERE t.a > 0\n",
    }
