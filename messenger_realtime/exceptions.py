"""Every error the app raises on purpose, under one root, and how errors are recorded.

RealtimeError
├── TransactionRequired   enqueue() outside the owner's transaction.atomic()
├── InvalidRow            a row that can never be delivered (quarantined at once)
│   └── UnencodablePayload  its payload cannot be carried (content past the wire's rule)
├── LeadershipLost        the worker no longer holds the single-runner lock
├── DatabaseUnusable      the database refuses the credentials or does not exist
├── InvalidToken          a credential the hub or the API refuses
└── HubProtocolError
    ├── HandshakeError    a handshake the hub refuses
    ├── ProtocolError     a message that breaks the SignalR protocol
    └── SequenceError     a stateful reconnect Sequence that skips messages
"""


class RealtimeError(Exception):
    """Root of the errors messenger_realtime raises on purpose."""


class TransactionRequired(RealtimeError, RuntimeError):
    """enqueue() was called outside the owner's transaction.atomic()."""


# Every code an InvalidRow may carry: the permanent failures, quarantined at the first
# attempt (and which a requeue would only quarantine again: outbox/operations.py).
INVALID_ROW_CODES = (
    "EntityNotFound",  # the referenced entity does not exist
    "MissingReference",  # the row lacks the id its kind needs
    "ReferenceMismatch",  # the row's ids disagree with the entity's
    "InvalidTarget",  # the kind does not go to that target
    "InvalidSessionKind",  # a session kind on a row that is not a media event
    "MissingSessionKind",  # a media row without its session kind
    "SessionKindMismatch",  # the row's session kind is not the session's
    "StateMismatch",  # the entity is not in the state the kind announces
    "UnencodablePayload",  # content no hub protocol carries exactly (contracts/content.py)
    "Unsupported",  # the host's DomainPort does not read the kind's entity (outbox.enums.READ_BY)
)


class UnsupportedKind(RealtimeError, ValueError):
    """outbox.enqueue of a kind the host's DomainPort cannot build: the optional read it
    needs (outbox.enums.READ_BY) is not implemented. Refused where the row is written,
    never quarantined an hour later."""


class InvalidRow(RealtimeError, ValueError):
    """A row that can never be delivered; str() is its `last_error` ("Code: detail"),
    whose code is one of INVALID_ROW_CODES.

    The rule: a row whose referenced entity does not exist, whose Kind / target /
    SessionKind combination breaks its contract, or whose content cannot be carried, is
    quarantined at once. Retrying cannot fix it (entities are never re-created under the
    same id, rows are immutable), and every retry would only delay the alert that
    someone must look at it.
    """

    def __init__(self, error: str) -> None:
        code, _, _ = error.partition(":")
        if code not in INVALID_ROW_CODES:  # a new code must be declared permanent first
            raise ValueError(f"InvalidRow code {code!r} is not in INVALID_ROW_CODES")
        super().__init__(error)
        self.code = code


class UnencodablePayload(InvalidRow):
    """A payload that breaks the wire's rule (contracts/content.py) or that an encoder
    refused: quarantined at once, alone; str() names the field, never its value."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"UnencodablePayload: {detail}")


class LeadershipLost(RealtimeError):
    """The single-runner advisory lock is no longer held by this worker."""


class DatabaseUnusable(RealtimeError):
    """The database refused the worker's credentials or does not exist: retrying cannot
    fix it, so the worker exits (non-zero) saying why; str() is psycopg's reason."""


class InvalidToken(RealtimeError):
    """Why a credential was refused (safe to show: never contains the token)."""


class TooManyConnections(InvalidToken):
    """A transport's open refused because its user holds MAX_CONNECTIONS_PER_USER (the
    place its negotiate took had lapsed): 429 over HTTP, the upgrade refused."""


class HubError(RealtimeError):
    """A hub method refuses a call: str() is what the client is told (its Completion's
    `HubException: ...`, as ASP.NET Core answers a HubException). Any other exception a
    method raises is logged and answered without a word of why."""


class HubProtocolError(RealtimeError):
    """A client broke the SignalR hub protocol."""


class HandshakeError(HubProtocolError):
    """A handshake the hub refuses; str() is sent to the client as {"error": ...}."""


class ProtocolError(HubProtocolError):
    """A message that breaks the protocol; the connection is closed with this reason."""


class SequenceError(HubProtocolError):
    """A Sequence message naming an id the hub never received (InvalidOperationException
    in ASP.NET's wording); the connection is closed with this reason."""


# SQLSTATEs of a connection that retrying cannot fix: the credentials or the database name
# are wrong (PostgreSQL's invalid_authorization_specification, invalid_password,
# invalid_catalog_name).
UNRECOVERABLE_SQLSTATES = frozenset({"28000", "28P01", "3D000"})


def database_cause(exc: BaseException) -> str:
    """What a database error says, for a log line or an exit: psycopg's (libpq's) first
    line, which names the host, port, user or database but never the password."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# The same refusals when they come at connect time, where libpq gives no SQLSTATE, only
# the server's FATAL message.
UNRECOVERABLE_AT_CONNECT = (
    "password authentication failed",
    "no pg_hba.conf entry",
    "does not exist",  # database "x" / role "x"
)


def unrecoverable(exc: BaseException) -> bool:
    """Whether a database error is one retrying cannot fix (wrong credentials or name)."""
    if getattr(exc, "sqlstate", None) in UNRECOVERABLE_SQLSTATES:
        return True
    text = str(exc)
    return "FATAL:" in text and any(words in text for words in UNRECOVERABLE_AT_CONNECT)


def describe_error(exc: BaseException) -> str:
    """`last_error` text: exception class and code only, never a message that may hold PII."""
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    code: object = None
    cause: BaseException | None = exc
    while code is None and cause is not None:  # e.g. redis wraps the socket's errno
        code = getattr(cause, "errno", None) or getattr(cause, "code", None)
        cause = cause.__cause__ or cause.__context__
    return (f"{name} (code {code})" if code else name)[:512]
