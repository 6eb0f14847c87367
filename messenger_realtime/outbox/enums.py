"""The spec's enums; stored values are the spec's PascalCase names."""

import functools
import re
from collections.abc import Mapping

from django.db import models


class RealtimeOutboxStatus(models.TextChoices):
    PENDING = "Pending"
    DONE = "Done"
    QUARANTINED = "Quarantined"


class RealtimeTargetKind(models.TextChoices):
    CHAT_GROUP = "ChatGroup"  # hub group chat:{ChatId}
    USER = "User"  # hub group user:{UserId}


class SessionKind(models.TextChoices):
    DIRECT = "Direct"  # 1:1 call
    CONFERENCE = "Conference"


class RealtimeDispatchKind(models.TextChoices):
    MESSAGE_RECEIVED = "MessageReceived"
    MESSAGE_EDITED = "MessageEdited"
    MESSAGE_DELETED = "MessageDeleted"
    READ_RECEIPT_UPDATED = "ReadReceiptUpdated"
    CHAT_UPDATED = "ChatUpdated"
    CONTACT_REQUEST_RECEIVED = "ContactRequestReceived"
    CONTACT_REQUEST_ACCEPTED = "ContactRequestAccepted"
    CONTACT_REMOVED = "ContactRemoved"
    CALL_INVITED = "CallInvited"
    CALL_ANSWERED = "CallAnswered"
    CALL_DECLINED = "CallDeclined"
    CALL_MISSED = "CallMissed"
    CALL_CANCELLED = "CallCancelled"
    CALL_ENDED = "CallEnded"
    CONFERENCE_INVITED = "ConferenceInvited"
    CONFERENCE_STARTED = "ConferenceStarted"
    CONFERENCE_ENDED = "ConferenceEnded"
    CONFERENCE_PARTICIPANT_JOINED = "ConferenceParticipantJoined"
    CONFERENCE_PARTICIPANT_LEFT = "ConferenceParticipantLeft"
    RECORDING_STARTED = "RecordingStarted"
    RECORDING_STOPPED = "RecordingStopped"
    RECORDING_AVAILABLE = "RecordingAvailable"
    RECORDING_FAILED = "RecordingFailed"
    SCREEN_SHARE_STARTED = "ScreenShareStarted"
    SCREEN_SHARE_STOPPED = "ScreenShareStopped"
    BLACKLIST_CHANGED = "BlacklistChanged"


_K = RealtimeDispatchKind

# The DomainPort method that reads the entity a kind's row refers to (its reference id):
# the build loads it once per batch (contracts/build.py), and a host's port must implement
# it before the host may write that kind (outbox.enqueue refuses the kind otherwise).
# messages, participants and chat_events every port implements; the others are optional
# capabilities (contacts, blacklists, calls and conferences, their participants,
# recordings) that cost a host nothing until it uses them.
READ_BY: Mapping[str, str] = {
    _K.MESSAGE_RECEIVED: "messages",
    _K.MESSAGE_EDITED: "messages",
    _K.MESSAGE_DELETED: "messages",
    _K.READ_RECEIPT_UPDATED: "participants",
    _K.CHAT_UPDATED: "chat_events",
    _K.CONTACT_REQUEST_RECEIVED: "contacts",
    _K.CONTACT_REQUEST_ACCEPTED: "contacts",
    _K.CONTACT_REMOVED: "contacts",
    _K.BLACKLIST_CHANGED: "blacklist_entries",
    **dict.fromkeys(
        (
            _K.CALL_INVITED,
            _K.CALL_ANSWERED,
            _K.CALL_DECLINED,
            _K.CALL_MISSED,
            _K.CALL_CANCELLED,
            _K.CALL_ENDED,
            _K.CONFERENCE_INVITED,
            _K.CONFERENCE_STARTED,
            _K.CONFERENCE_ENDED,
        ),
        "calls",
    ),
    **dict.fromkeys(
        (
            _K.CONFERENCE_PARTICIPANT_JOINED,
            _K.CONFERENCE_PARTICIPANT_LEFT,
            _K.SCREEN_SHARE_STARTED,
            _K.SCREEN_SHARE_STOPPED,
        ),
        "call_participants",
    ),
    **dict.fromkeys(
        (
            _K.RECORDING_STARTED,
            _K.RECORDING_STOPPED,
            _K.RECORDING_AVAILABLE,
            _K.RECORDING_FAILED,
        ),
        "recordings",
    ),
}

# Time-critical kinds: claimed ahead of any backlog (a ringing phone, a call that ended).
URGENT_KINDS = (
    RealtimeDispatchKind.CALL_INVITED,
    RealtimeDispatchKind.CALL_CANCELLED,
    RealtimeDispatchKind.CALL_MISSED,
    RealtimeDispatchKind.CALL_ENDED,
    RealtimeDispatchKind.CALL_DECLINED,
    RealtimeDispatchKind.CALL_ANSWERED,
    RealtimeDispatchKind.CONFERENCE_INVITED,
    RealtimeDispatchKind.CONFERENCE_STARTED,
    RealtimeDispatchKind.CONFERENCE_ENDED,
)

# Kinds a delivery deadline (DELIVERY_DEADLINES) may drop: media signals only, never a
# message, a receipt or any chat state change (clients rebuild those from REST anyway,
# but a lost message event is never acceptable). outbox/checks.py holds the setting to it.
EXPIRABLE_KINDS = frozenset(
    {
        RealtimeDispatchKind.CALL_INVITED,
        RealtimeDispatchKind.CALL_ANSWERED,
        RealtimeDispatchKind.CALL_DECLINED,
        RealtimeDispatchKind.CALL_MISSED,
        RealtimeDispatchKind.CALL_CANCELLED,
        RealtimeDispatchKind.CALL_ENDED,
        RealtimeDispatchKind.CONFERENCE_INVITED,
        RealtimeDispatchKind.CONFERENCE_STARTED,
        RealtimeDispatchKind.CONFERENCE_ENDED,
        RealtimeDispatchKind.CONFERENCE_PARTICIPANT_JOINED,
        RealtimeDispatchKind.CONFERENCE_PARTICIPANT_LEFT,
        RealtimeDispatchKind.SCREEN_SHARE_STARTED,
        RealtimeDispatchKind.SCREEN_SHARE_STOPPED,
        RealtimeDispatchKind.RECORDING_STARTED,
        RealtimeDispatchKind.RECORDING_STOPPED,
    }
)

_WORD_BOUNDARY = re.compile(r"(?<!^)(?=[A-Z])")


@functools.cache  # a handful of kinds, looked up for every dispatched row
def event_name(kind: str) -> str:
    """Hub event name of a kind: the spec's snake_case (MessageReceived -> message_received)."""
    return _WORD_BOUNDARY.sub("_", kind).lower()
