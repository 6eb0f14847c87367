"""The key=value log formatter: the same line logging's own formatter would write, plus the
record's plain extra fields in name order, with tokens in URLs redacted."""

import logging
import uuid

from messenger_realtime.ops.logging import KeyValueFormatter


def record(created: float, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("messenger_realtime.x", logging.INFO, "p.py", 1, "dispatched", (), None)
    rec.created, rec.msecs = created, (created - int(created)) * 1000
    rec.__dict__.update(extra)
    return rec


def test_the_time_matches_loggings_own_across_seconds() -> None:
    ours, theirs = KeyValueFormatter(), logging.Formatter("%(asctime)s")
    for created in (1_764_570_000.001, 1_764_570_000.999, 1_764_570_001.5, 1_764_570_000.25):
        rec = record(created)
        assert ours.format(rec).split(" INFO ")[0] == theirs.format(rec)


def test_plain_extras_follow_in_name_order_and_objects_are_left_out() -> None:
    entry = uuid.UUID(int=7)
    line = KeyValueFormatter().format(record(1.0, Seq=3, EntryId=entry, request=object()))
    assert line.endswith(f"INFO messenger_realtime.x dispatched EntryId={entry} Seq=3")


def test_tokens_in_a_logged_url_are_redacted_and_other_lines_left_alone() -> None:
    rec = record(1.0, path="/hubs/messenger?id=tok123&access_token=eyJ.a.b")
    assert "path=/hubs/messenger?id=[redacted]&access_token=[redacted]" in (
        KeyValueFormatter().format(rec)
    )
    assert KeyValueFormatter().format(record(1.0, ChatId="x")).endswith("ChatId=x")
