"""Control messages to a user's open hub connections (in any Daphne process).

Live membership: owners call membership_changed() inside the transaction that adds or removes a
participant. After commit, each affected user's connections re-read their memberships
through the domain port. This is the fast path; the durable one is the ChatUpdated row the
owner also writes for that user, which the consumer treats the same way. A failure here
is logged and never fails the owner.
"""

import hashlib
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
MEMBERSHIP_EVENT = "realtime.membership"
DISCONNECT_EVENT = "realtime.disconnect"
SESSION_ENDED_EVENT = "realtime.session_ended"
REVOKED_EVENT = "realtime.revoked"


def membership_changed(*user_ids: UUID, using: str = "default") -> None:
    """After the current transaction commits, resync these users' hub connections."""
    targets = list(dict.fromkeys(user_ids))

    def send() -> None:
        for user_id in targets:  # the outbox row covers each user if this fails
            _tell_user(user_id, {"type": MEMBERSHIP_EVENT}, "membership")

    transaction.on_commit(send, using=using)


def _tell_user(user_id: UUID, message: dict[str, Any], action: str) -> None:
    """Send a control message to the user's group now; a failure is logged (each
    caller says what covers for it), never raised into the owner."""
    try:
        async_to_sync(get_channel_layer().group_send)(layer_group(HubTarget.user(user_id)), message)
    except Exception as exc:
        logger.warning(
            f"{action} fast path failed",
            extra={"action": action, Field.USER_ID: user_id, Field.ERROR_CODE: describe_error(exc)},
        )


def disconnect_user(user_id: UUID) -> None:
    """Close the user's connections now with allowReconnect: clients reconnect, which
    re-authenticates them (a revoked user is refused) and rebuilds their groups."""
    layer = get_channel_layer()
    async_to_sync(layer.group_send)(
        layer_group(HubTarget.user(user_id)), {"type": DISCONNECT_EVENT}
    )


def credentials_revoked(user_id: UUID, using: str = "default") -> None:
    """After the current transaction commits (at once outside one), close every hub
    connection of the user, in every Daphne process, for good (no allowReconnect): the
    user was deactivated or deleted, or their credentials were revoked, so a reconnect
    would be refused. Sent before anything committed after the revocation can be pushed
    (those go through the outbox), so it reaches each process's queue ahead of them. A
    failure is logged; the next negotiate or REST call is refused all the same."""

    def send() -> None:
        _tell_user(user_id, {"type": REVOKED_EVENT}, "revocation")

    transaction.on_commit(send, using=using)


def session_digest(session_key: str) -> str:
    """What a hub connection and a logout name a Django session by: the key is a
    credential, so only its digest goes through Redis."""
    return hashlib.sha256(session_key.encode()).hexdigest()


def session_ended(user_id: UUID, session_key: str) -> None:
    """The user logged out of this Django session: close the hub connections that it
    authenticated (the demo page's, say), for good: their reconnect would find no
    session. Connections of the user's other sessions and tokens stay. A failure is
    logged: such a connection still ends when the session would have expired."""
    message = {"type": SESSION_ENDED_EVENT, "session": session_digest(session_key)}
    _tell_user(user_id, message, "logout")


def on_user_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """Django's user_logged_out (sent before the session is flushed)."""
    session: Any = getattr(request, "session", None)
    session_key = getattr(session, "session_key", None)
    if user is not None and session is not None and session_key:
        # Deleted before the control message goes, not just after as logout() would: a
        # connection that joins its user group too late to hear the message reads the
        # session after joining (hub/connection/lifecycle.py), and must find it gone by then.
        session.delete()
        session_ended(UUID(str(user.pk)), session_key)
