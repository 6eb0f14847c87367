"""How a connection ends, as data: every way is an `Ending`, and HubConnection.end() (in
lifecycle.py) is the one way to end it.

`end(ending)` does, in order, what the ending asks for: nothing at all when the ending
comes `once` and the connection is already closing (a second cause changes nothing);
marks it closing (no more events; a resume it may prompt is refused); counts a forced
close (`metric`: messenger_realtime_hub_forced_closes_total's bounded label); logs its
`reason` with the connection's ids; sends the handshake's refusal or a Close (after the
event frames built before it, outbound.py); closes the transport; releases everything
once (the registry entry, its place, its groups, its clock entry).
"""

from dataclasses import dataclass
from typing import Any

from messenger_realtime.hub.connection.authentication import (
    REVOKED,
    SESSION_ENDED,
    Authentication,
)

CLOSED, ENDED = "hub connection closed", "hub connection ended"  # the log lines
UNEXPECTED = "Connection closed with an error."  # ASP.NET's words when it does not say why
CLIENT_TIMEOUT = (
    "Connection closed with an error. OperationCanceledException: Client hasn't sent a "
    "message/ping within the configured ClientTimeoutInterval."
)
# Why a connection is dropped (a Close with allowReconnect), besides its credentials'
# expiry (authentication.py's expiry reasons).
OVERRUN = "events dropped (channel layer overrun)"
BACKPLANE_RESTARTED = "events may be lost (channel layer server restarted)"
REPLAY_OVERFLOW = "replay buffer over STATEFUL_RECONNECT_BUFFER_SIZE"
SEND_BUFFER_OVER = "send buffer over SEND_BUFFER_LIMIT"
RELEASE_FAILED = "events held for a recovery could not be checked"
# Bounded label values of messenger_realtime_hub_forced_closes_total.
_METRICS = {
    "token expired": "expired",
    "session expired": "expired",
    SEND_BUFFER_OVER: "send_buffer",
    OVERRUN: "overrun",
    BACKPLANE_RESTARTED: "backplane_restart",
    REPLAY_OVERFLOW: "replay_buffer",
    RELEASE_FAILED: "recovery",
}


@dataclass(frozen=True, slots=True)
class Ending:
    """Why a connection ends and what its end sends (see the module's docstring)."""

    reason: str | None = None  # logged with its ids (never a payload); None: no line
    log: str = CLOSED  # the line's message
    fields: tuple[tuple[str, Any], ...] = ()  # more fields of the line: (name, value)
    once: bool = False  # nothing when the connection is already closing
    metric: str | None = None  # a forced close, counted under this label
    close: bool = False  # a Close goes out first
    error: str | None = None  # the Close's error: what the client is told
    allow_reconnect: bool = False  # the Close tells the client to reconnect
    handshake_error: str | None = None  # instead of a Close: the handshake's refusal
    close_transport: bool = True  # False: the transport is gone, or its caller closes it
    drop: bool = False  # read nothing more from the client, for good (a flood)
    # Connects charged to its user's RATE_LIMIT_CONNECTS (a flood: reconnecting at once
    # would only flood again, so it costs as much as this many connects).
    connects_charged: int = 0


# The client sent its Close, or nothing reached the client for long: end, no word sent.
CLIENT_CLOSED = Ending()
# The transport is gone (or its caller closes it; a connect refused before it was
# accepted): release only.
RELEASED = Ending(close_transport=False)
# Server shutdown, or ops asked this user's connections to reconnect.
SHUTDOWN = Ending(close=True, allow_reconnect=True)


def error(message: str, *, allow_reconnect: bool = False) -> Ending:
    """A Close with this error (`Connection closed with an error. ...`), logged."""
    return Ending(reason=message, close=True, error=message, allow_reconnect=allow_reconnect)


def dropped(reason: str, **fields: Any) -> Ending:
    """Close with allowReconnect, once: the client reconnects (authenticating again) and
    resyncs over REST. Counted by reason, logged with `fields`."""
    return Ending(
        reason=reason,
        fields=tuple(fields.items()),
        once=True,
        metric=_METRICS.get(reason, "other"),
        close=True,
        allow_reconnect=True,
    )


def expired(auth: Authentication, now: float) -> Ending | None:
    """How a connection whose credentials no longer hold at `now` ends (a Close with
    allowReconnect, for the reason they give: token or session expired); None while they
    hold. Every place that checks expiry asks this."""
    return None if auth.holds(now) else dropped(auth.expiry_reason)


def session_ended(reason: str = SESSION_ENDED, *, metric: str = "logout") -> Ending:
    """Its Django session ended (logout), or its credentials were revoked (`REVOKED`,
    metric "revoked"): Close saying so, without allowReconnect (a reconnect could only be
    refused; the official clients then stop for good)."""
    return Ending(
        reason=reason,
        once=True,
        metric=metric,
        close=True,
        error=f"Connection closed with an error. {reason}",
    )


def revoked() -> Ending:
    """Deactivated, deleted, or its credentials revoked: Close for good."""
    return session_ended(REVOKED, metric="revoked")


def handshake_refused(message: str) -> Ending:
    """The handshake refused (or not completed in time): its error, then the end."""
    return Ending(handshake_error=message)


def gone(reason: str) -> Ending:
    """Nothing reached the client for DISCONNECT_TIMEOUT: end without a resume."""
    return Ending(reason=reason, log=ENDED)
