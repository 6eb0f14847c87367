"""A connection's endings as data (hub/connection/ending.py): what each sends, counts
and logs, as the six ways to end it did before there was one."""

from messenger_realtime.hub.connection import ending
from messenger_realtime.hub.connection.authentication import REVOKED, SESSION_ENDED


def test_a_drop_closes_with_allow_reconnect_once_counted_by_its_bounded_reason() -> None:
    dropped = ending.dropped(ending.SEND_BUFFER_OVER, unsent=12)
    assert (dropped.close, dropped.allow_reconnect, dropped.error, dropped.once) == (
        True,
        True,
        None,
        True,
    )
    assert dropped.metric == "send_buffer" and dropped.fields == (("unsent", 12),)
    assert ending.dropped("token expired").metric == "expired"
    assert ending.dropped("anything else").metric == "other"


def test_a_logout_or_revocation_closes_for_good_saying_why() -> None:
    logout, revoked = ending.session_ended(), ending.revoked()
    assert logout.error == f"Connection closed with an error. {SESSION_ENDED}"
    assert (logout.metric, logout.allow_reconnect, logout.once) == ("logout", False, True)
    assert (revoked.error, revoked.metric) == (
        f"Connection closed with an error. {REVOKED}",
        "revoked",
    )


def test_an_error_close_is_logged_and_not_counted() -> None:
    closed = ending.error("Connection closed with an error. X", allow_reconnect=True)
    assert (closed.reason, closed.error, closed.metric, closed.once) == (
        "Connection closed with an error. X",
        "Connection closed with an error. X",
        None,
        False,
    )


def test_endings_without_a_close() -> None:
    assert not ending.CLIENT_CLOSED.close and ending.CLIENT_CLOSED.close_transport
    assert not ending.RELEASED.close and not ending.RELEASED.close_transport
    assert ending.SHUTDOWN.close and ending.SHUTDOWN.allow_reconnect and not ending.SHUTDOWN.reason
    assert ending.gone("no poll within DISCONNECT_TIMEOUT").log == ending.ENDED
    refused = ending.handshake_refused("Handshake was canceled.")
    assert refused.handshake_error == "Handshake was canceled." and not refused.close
