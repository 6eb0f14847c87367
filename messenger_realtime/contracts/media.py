"""Media contracts: SessionKind picks the shape and the group.

Direct     -> the 1:1-call contract to user:{TargetUserId} (caller or callee);
Conference -> the conference contract to chat:{ChatId}.
Invitations (CallInvited, ConferenceInvited, ConferenceStarted) carry `media.roomName`;
the hub completes it per recipient with a MediaJoinModel (room token, TURN credentials)
at delivery, so no secret is ever stored, queued or logged (hub/media_credentials.py).
"""

from messenger_realtime.contracts.base import (
    Contract,
    Payload,
    compact,
    ids,
    iso,
    require_chat_group,
    require_user,
)
from messenger_realtime.contracts.events import OutboxRow
from messenger_realtime.contracts.port import CallParticipantView, CallView, RecordingView
from messenger_realtime.exceptions import InvalidRow
from messenger_realtime.outbox.enums import READ_BY, SessionKind
from messenger_realtime.outbox.enums import RealtimeDispatchKind as K

MEDIA_INVITES = {K.CALL_INVITED, K.CONFERENCE_INVITED, K.CONFERENCE_STARTED}
# A session a user may still join (the rule the host's REST applies to answering or
# joining): media credentials are minted at delivery only for one of these, whether the
# event is pushed live or recovered later, when the call may be long over.
JOINABLE = frozenset({"Ringing", "Active"})


def session_payload(row: OutboxRow, call: CallView) -> Payload:
    """Validate the row's SessionKind and target against the call; the base contract."""
    if row.session_kind is None:
        raise InvalidRow(f"MissingSessionKind: {row.kind} needs Direct or Conference")
    if row.session_kind != call.session_kind:
        raise InvalidRow(
            f"SessionKindMismatch: row says {row.session_kind}, the session is {call.session_kind}"
        )
    if call.session_kind == SessionKind.DIRECT:
        require_user(row, call.initiator_user_id, call.callee_user_id)
        payload: Payload = {
            "sessionKind": SessionKind.DIRECT,
            **ids(
                callId=call.id,
                chatId=call.chat_id,
                callerUserId=call.initiator_user_id,
                calleeUserId=call.callee_user_id,
                endedByUserId=call.ended_by_user_id,
            ),
        }
    else:
        require_chat_group(row, call.chat_id)
        payload = {
            "sessionKind": SessionKind.CONFERENCE,
            **ids(
                conferenceId=call.id,
                chatId=call.chat_id,
                startedByUserId=call.initiator_user_id,
                invitedUserId=call.invited_user_id,
                endedByUserId=call.ended_by_user_id,
            ),
        }
    payload.update(
        status=call.status,
        createdAt=iso(call.created_at),
        answeredAt=iso(call.answered_at),
        endedAt=iso(call.ended_at),
    )
    if row.kind in MEDIA_INVITES and call.status in JOINABLE:
        payload["media"] = {"roomName": call.room_name}
    return compact(payload)


def call_event(row: OutboxRow, call: CallView) -> Payload:
    return session_payload(row, call)


def participant_event(row: OutboxRow, p: CallParticipantView) -> Payload:
    payload = session_payload(row, p.call)
    payload["participant"] = compact(
        {
            **ids(participantId=p.id, userId=p.user_id),
            "joinedAt": iso(p.joined_at),
            "leftAt": iso(p.left_at),
            "screenSharing": p.screen_sharing,
        }
    )
    return payload


def recording_event(row: OutboxRow, r: RecordingView) -> Payload:
    payload = session_payload(row, r.call)
    payload["recording"] = compact(
        {
            **ids(recordingId=r.id, startedByUserId=r.started_by_user_id),
            "status": r.status,
            "startedAt": iso(r.started_at),
            "stoppedAt": iso(r.stopped_at),
            "fileUrl": r.file_url or None,
            "failureCode": r.failure_code or None,
        }
    )
    return payload


def _read_by(method: str) -> list[str]:
    return [kind for kind, reader in READ_BY.items() if reader == method]


CONTRACTS: dict[str, Contract] = {
    **{kind: Contract("ref_id", call_event, kind in MEDIA_INVITES) for kind in _read_by("calls")},
    **{kind: Contract("ref_id", participant_event) for kind in _read_by("call_participants")},
    **{kind: Contract("ref_id", recording_event) for kind in _read_by("recordings")},
}
