"""A log formatter: a readable line plus the record's structured `extra` as key=value.

Only plain values are rendered (objects such as Django's `request` are skipped: their
repr carries the full URL), and access or connection tokens in a URL are redacted in the
whole line, whoever logged it.
"""

import logging
import re
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
    return _SECRET_QUERY.sub(r"\1[redacted]", text)


class KeyValueFormatter(logging.Formatter):
    """`time level logger message key=value ...` with the record's plain extra fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = {
            k: v for k, v in vars(record).items() if k not in _STANDARD and isinstance(v, _PLAIN)
        }
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in sorted(extras.items()))
        return scrub_query_secrets(line)
