"""The app's log lines: their fields in the message text, and a formatter.

Every module logs through `get_logger(__name__)`, a FieldLogger: a line's structured
`extra` (EntryId, Seq, UserId, rows, ...) is written into its message as key=value as
well as kept as record attributes, so a host's own LOGGING with a plain `%(message)s`
formatter keeps them, and a JSON formatter (python-json-logger's, for instance) gets them
as fields. KeyValueFormatter, the app's own (ensure_handler), renders a record's plain
extras as key=value after the message, but not those the message already carries.

Only plain values are rendered (objects such as Django's `request` are skipped: their
repr carries the full URL), and access or connection tokens in a URL are redacted in the
whole line, whoever logged it.
"""

import json
import logging
import re
import time
from collections.abc import Mapping, MutableMapping
from enum import StrEnum
from typing import Any
from uuid import UUID

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_PLAIN = (str, int, float, bool, UUID, type(None))
# On a record whose message carries its fields already (FieldLogger): the message as the
# caller wrote it, before the fields (JsonFormatter's `message`).
BARE_MESSAGE = "_bare_message"
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


def fields_text(fields: Mapping[str, Any]) -> str:
    """`key=value ...` of the plain values among `fields`, by key."""
    return " ".join(f"{k}={v}" for k, v in sorted(fields.items()) if isinstance(v, _PLAIN))


class FieldLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose lines carry their `extra` fields in the message too (the module's
    docstring). Costs nothing for a line below the logger's level."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        extra = kwargs.get("extra")
        if extra:
            text = scrub_query_secrets(fields_text(extra))  # whatever formats it next
            if text:
                # With %-arguments the message is formatted: a % in a value stays one.
                kwargs["extra"] = {**extra, BARE_MESSAGE: msg}
                msg = f"{msg} {text.replace('%', '%%') if args else text}"
        # The caller's file and line, not this method's (logging skips its own frames).
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        self.logger.log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs  # the caller's extra as given (the adapter has none of its own)


def get_logger(name: str) -> FieldLogger:
    """The app's logger for a module (`get_logger(__name__)`)."""
    return FieldLogger(logging.getLogger(name), {})


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
        if BARE_MESSAGE not in fields:  # else the message has them (FieldLogger)
            text = fields_text({k: fields[k] for k in fields.keys() - _STANDARD})
            if text:
                line += " " + text
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


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `time` (ISO 8601, UTC), `level`, `logger`, `message` (as
    the caller wrote it, without the fields) and each plain field of the record's `extra`
    as a key of its own; tokens in URLs redacted as KeyValueFormatter does. For a host
    that ships JSON logs: `"formatter": "messenger_realtime.ops.logging.JsonFormatter"`
    under LOGGING's `formatters` ("()" key) (docs/operations.md, Logs and traces)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = vars(record)
        bare = fields.get(BARE_MESSAGE)
        if bare is None:
            message = record.getMessage()
        else:
            message = str(bare) % record.args if record.args else str(bare)
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key in sorted(fields.keys() - _STANDARD):
            value = fields[key]
            if not key.startswith("_") and isinstance(value, _PLAIN) and key not in line:
                line[key] = str(value) if isinstance(value, UUID) else value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return scrub_query_secrets(json.dumps(line, ensure_ascii=False))
