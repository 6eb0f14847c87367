"""The key=value log formatter: the same line logging's own formatter would write, plus the
record's plain extra fields in name order, with tokens in URLs redacted; and the handler
the app gives itself when a host's logging config reaches none of its loggers."""

import logging
import uuid
from collections.abc import Iterator

import pytest

from messenger_realtime.ops.logging import APP_LOGGER, KeyValueFormatter, ensure_handler


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
