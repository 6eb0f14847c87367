"""A log formatter: a readable line plus the record's structured `extra` as key=value.

Only plain values are rendered (objects such as Django's `request` are skipped: their
repr carries the full URL), and access or connection tokens in a URL are redacted in the
whole line, whoever logged it.
"""

import logging
import re
import time
from enum import StrEnum
from uuid import UUID

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_PLAIN = (str, int, float, bool, UUID, type(None))
_SECRET_QUERY = re.compile(r"((?:access_token|id)=)[^&\s\"']*")


class Field(StrEnum):
    """Structured log field names, spelled as the spec's log lines spell them."""

    ENTRY_ID = "EntryId"
    KIND = "Kind"
    CHAT_ID = "ChatId"
    TARGET_USER_ID = "TargetUserId"
    USER_ID = "UserId"
    MESSAGE_ID = "MessageId"
    REF_ID = "RefId"
    CONNECTION_ID = "ConnectionId"  # a hub connection (negotiate's connectionId)
    SEQ = "Seq"
    CREATED_AT = "CreatedAt"
    ATTEMPTS = "Attempts"
    ERROR_CODE = "errorCode"  # describe_error(): class and code, never a message
    ROWS = "rows"  # batch claimed
    DISPATCHED = "dispatched"  # job completed: the pass's counts
    RETRIED = "retried"
    QUARANTINED = "quarantined"
    DURATION_MS = "DurationMs"
    JOB_RUN_ID = "jobRunId"
    HOLDER_PID = "HolderPid"  # the lease (dispatch/lease.py)
    HOLDER = "Holder"
    LEASE_AGE = "HeartbeatAgeSeconds"


def scrub_query_secrets(text: str) -> str:
    """Hide access tokens and connection tokens in a logged URL."""
    if "id=" not in text and "access_token=" not in text:  # most lines: no regex pass
        return text
    return _SECRET_QUERY.sub(r"\1[redacted]", text)


class KeyValueFormatter(logging.Formatter):
    """`time level logger message key=value ...` with the record's plain extra fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self._stamp = (-1, "")  # (second, its strftime): one tuple, so threads never mix

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """As logging's default, with one strftime per second instead of per line (the
        worker writes a `dispatched` line per row)."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._stamp = stamp
        return f"{stamp[1]},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = vars(record)
        extras = sorted(
            (k, fields[k]) for k in fields.keys() - _STANDARD if isinstance(fields[k], _PLAIN)
        )
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras)
        return scrub_query_secrets(line)


APP_LOGGER = "messenger_realtime"


def ensure_handler() -> None:
    """Give the app's loggers a stderr handler (INFO, this formatter) when the host's
    logging config reaches none: under Django's default LOGGING only the `django` logger
    has handlers, and the worker's and the hub's lines would vanish below WARNING. A host
    that configures any handler the app's records reach keeps full control."""
    logger = logging.getLogger(APP_LOGGER)
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
