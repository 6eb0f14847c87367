"""The key=value log formatter: the same line logging's own formatter would write, plus the
record's plain extra fields in name order, with tokens in URLs redacted; and the handler
the app gives itself when a host's logging config reaches none of its loggers."""

import io
import json
import logging
import uuid
from collections.abc import Iterator
from uuid import UUID

import pytest

from messenger_realtime.ops.logging import (
    APP_LOGGER,
    JsonFormatter,
    KeyValueFormatter,
    ensure_handler,
    get_logger,
)


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


@pytest.fixture
def bare_app_logger() -> Iterator[logging.Logger]:
    """The app's logger as a host with Django's default LOGGING leaves it: no handler
    reaches it (the root has none: pytest's own capture handlers are set aside too), level
    unset; everything restored afterwards."""
    logger, root = logging.getLogger(APP_LOGGER), logging.getLogger()
    saved = (logger.handlers[:], logger.level, root.handlers[:], root.level)
    logger.handlers, root.handlers = [], []
    logger.setLevel(logging.NOTSET)
    root.setLevel(logging.WARNING)
    yield logger
    logger.handlers, root.handlers = saved[0], saved[2]
    logger.setLevel(saved[1])
    root.setLevel(saved[3])


def test_without_a_host_handler_the_app_s_info_lines_reach_stderr(
    bare_app_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    pytest_handlers, root.handlers = root.handlers[:], []  # pytest's, added for the call
    try:
        ensure_handler()
        child = logging.getLogger("messenger_realtime.dispatch.x")
        child.info("job completed", extra={"rows": 3})
    finally:
        root.handlers = pytest_handlers
    assert "INFO messenger_realtime.dispatch.x job completed rows=3" in capsys.readouterr().err


def test_a_host_s_own_handler_is_left_in_control(bare_app_logger: logging.Logger) -> None:
    # pytest's capture handlers on the root stand for the host's own here.
    assert logging.getLogger().handlers
    ensure_handler()
    assert bare_app_logger.handlers == [] and bare_app_logger.level == logging.NOTSET


def test_the_apps_lines_carry_their_fields_in_the_message_under_a_plain_formatter() -> None:
    """A host's LOGGING with `%(message)s` only: the fields are in the text. Before: the
    worker printed a bare `dispatched`."""
    stream, logger = io.StringIO(), logging.getLogger("messenger_realtime.test_fields")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log = get_logger("messenger_realtime.test_fields")
        log.info("dispatched", extra={"EntryId": UUID(int=7), "Seq": 3, "request": object()})
        log.warning("odd %s", "50%", extra={"share": "10%"})
        log.debug("not written", extra={"Seq": 1})
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue().splitlines() == [
        f"dispatched EntryId={UUID(int=7)} Seq=3",
        "odd 50% share=10%",
    ]


def test_json_lines_have_the_bare_message_and_each_field() -> None:
    record = logging.LogRecord("messenger_realtime.x", logging.INFO, "f", 1, "m %s", ("a",), None)
    line = json.loads(JsonFormatter().format(record))
    assert (line["message"], line["level"], line["logger"]) == (
        "m a",
        "INFO",
        "messenger_realtime.x",
    )
    stream, logger = io.StringIO(), logging.getLogger("messenger_realtime.test_json")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        get_logger("messenger_realtime.test_json").info(
            "hub connected", extra={"UserId": UUID(int=1), "url": "/hubs?access_token=eyJ.x"}
        )
    finally:
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["message"] == "hub connected" and line["UserId"] == str(UUID(int=1))
    assert line["url"] == "/hubs?access_token=[redacted]"
    assert line["time"].endswith("Z")
