"""Owner use cases of the host's messenger domain (see each module)."""

from . import revocation  # noqa: F401  (services.revocation, for the API)
from .calls import (
    answer_call,
    cancel_call,
    decline_call,
    end_session,
    reap_missed_calls,
    start_call,
)
from .chats import (
    accept_chat,
    add_participant,
    create_chat,
    mark_read,
    remove_participant,
    rename_chat,
)
from .conferences import (
    finalize_recording,
    invite,
    join,
    leave,
    set_screen_share,
    start_conference,
    start_recording,
    stop_recording,
)
from .contacts import accept_contact, remove_contact, request_contact, set_blocked
from .errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound
from .messages import delete_message, edit_message, post_message

__all__ = [
    "Conflict",
    "DomainError",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "accept_chat",
    "accept_contact",
    "add_participant",
    "answer_call",
    "cancel_call",
    "create_chat",
    "decline_call",
    "delete_message",
    "edit_message",
    "end_session",
    "finalize_recording",
    "invite",
    "join",
    "leave",
    "mark_read",
    "post_message",
    "reap_missed_calls",
    "remove_contact",
    "remove_participant",
    "rename_chat",
    "request_contact",
    "set_blocked",
    "set_screen_share",
    "start_call",
    "start_conference",
    "start_recording",
    "stop_recording",
]
