"""Conferences in a chat, their participants, screen share, and recordings (both kinds)."""

import re
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from messenger_realtime.outbox.enums import RealtimeDispatchKind
from messenger_realtime.uuid7 import uuid7

from ..models import CallParticipant, CallSession, Participant, Recording
from .blocking import refuse_if_blocked
from .calls import media_event, no_live_call, require_status, session_of
from .chats import active_participant
from .errors import Conflict, InvalidInput, NotFound

# Failure codes are machine words from the media server, shown to clients as is.
FAILURE_CODE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _is_active_conference(call: CallSession) -> bool:
    return (
        call.session_kind == CallSession.Kind.CONFERENCE
        and call.status == CallSession.Status.ACTIVE
    )


def start_conference(user_id: UUID, chat_id: UUID) -> CallSession:
    with transaction.atomic():
        active_participant(chat_id, user_id)
        no_live_call(chat_id)
        call = CallSession.objects.create(
            session_kind=CallSession.Kind.CONFERENCE,
            chat_id=chat_id,
            room_name=f"conf-{uuid7().hex}",
            status=CallSession.Status.ACTIVE,
            initiator_id=user_id,
        )
        CallParticipant.objects.create(call=call, user_id=user_id)
        media_event(call, RealtimeDispatchKind.CONFERENCE_STARTED, call.id)
    return call


def invite(user_id: UUID, call_id: UUID, invitee_id: UUID) -> CallSession:
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if not _is_active_conference(call):
            raise Conflict("only an active conference takes invitations")
        if not Participant.objects.filter(
            chat_id=call.chat_id, user_id=invitee_id, is_active=True
        ).exists():
            raise InvalidInput("the invitee is not a member of this chat")
        refuse_if_blocked(user_id, [invitee_id], "an invitation to them")
        CallSession.objects.filter(id=call.id).update(invited_user_id=invitee_id)
        call.refresh_from_db()
        media_event(call, RealtimeDispatchKind.CONFERENCE_INVITED, call.id)
    return call


def join(user_id: UUID, call_id: UUID) -> CallParticipant:
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if not _is_active_conference(call):
            raise Conflict("only an active conference can be joined")
        if CallParticipant.objects.filter(
            call=call, user_id=user_id, left_at__isnull=True
        ).exists():
            raise Conflict("already in the conference")
        participant = CallParticipant.objects.create(call=call, user_id=user_id)
        media_event(call, RealtimeDispatchKind.CONFERENCE_PARTICIPANT_JOINED, participant.id)
    return participant


def _present(user_id: UUID, call: CallSession) -> CallParticipant:
    try:
        return CallParticipant.objects.select_for_update().get(
            call=call, user_id=user_id, left_at__isnull=True
        )
    except CallParticipant.DoesNotExist as exc:
        raise Conflict("you are not in this call") from exc


def leave(user_id: UUID, call_id: UUID) -> CallParticipant:
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if call.session_kind != CallSession.Kind.CONFERENCE:
            raise InvalidInput("hang up a 1:1 call instead")
        participant = _present(user_id, call)
        CallParticipant.objects.filter(id=participant.id).update(
            left_at=Now(), screen_sharing=False
        )
        media_event(call, RealtimeDispatchKind.CONFERENCE_PARTICIPANT_LEFT, participant.id)
    return participant


def set_screen_share(user_id: UUID, call_id: UUID, active: bool) -> CallParticipant:
    with transaction.atomic():
        call = session_of(user_id, call_id)
        require_status(call, CallSession.Status.ACTIVE)
        participant = _present(user_id, call)
        if participant.screen_sharing == active:
            return participant
        CallParticipant.objects.filter(id=participant.id).update(screen_sharing=active)
        if active:
            media_event(call, RealtimeDispatchKind.SCREEN_SHARE_STARTED, participant.id)
        else:
            media_event(call, RealtimeDispatchKind.SCREEN_SHARE_STOPPED, participant.id)
    participant.refresh_from_db()
    return participant


def start_recording(user_id: UUID, call_id: UUID) -> Recording:
    with transaction.atomic():
        call = session_of(user_id, call_id)
        require_status(call, CallSession.Status.ACTIVE)
        if call.recordings.filter(status=Recording.Status.RECORDING).exists():
            raise Conflict("already recording")
        recording = Recording.objects.create(call=call, started_by_id=user_id)
        media_event(call, RealtimeDispatchKind.RECORDING_STARTED, recording.id)
    return recording


def _recording(recording_id: UUID) -> Recording:
    try:
        return Recording.objects.select_for_update().select_related("call").get(id=recording_id)
    except Recording.DoesNotExist as exc:
        raise NotFound("recording not found") from exc


def stop_recording(user_id: UUID, recording_id: UUID) -> Recording:
    with transaction.atomic():
        recording = _recording(recording_id)
        session_of(user_id, recording.call_id, lock=False)
        if recording.status != Recording.Status.RECORDING:
            raise Conflict(f"the recording is {recording.status}")
        Recording.objects.filter(id=recording.id).update(
            status=Recording.Status.STOPPED, stopped_at=Now()
        )
        media_event(recording.call, RealtimeDispatchKind.RECORDING_STOPPED, recording.id)
    recording.refresh_from_db()
    return recording


def finalize_recording(
    recording_id: UUID, *, file_url: str = "", failure_code: str = ""
) -> Recording:
    """The media server's verdict on a stopped recording: Available (with its URL) or
    Failed (with a code) -> RecordingAvailable / RecordingFailed."""
    if bool(file_url) == bool(failure_code):
        raise InvalidInput("give exactly one of a file URL or a failure code")
    if failure_code and not FAILURE_CODE.match(failure_code):
        raise InvalidInput("a failure code is 1-64 letters, digits, '_', '.' or '-'")
    if file_url and not file_url.startswith(("https://", "http://")):
        raise InvalidInput("the file URL must be http(s)")
    with transaction.atomic():
        recording = _recording(recording_id)
        if recording.status not in (Recording.Status.RECORDING, Recording.Status.STOPPED):
            raise Conflict(f"the recording is already {recording.status}")
        status = Recording.Status.AVAILABLE if file_url else Recording.Status.FAILED
        Recording.objects.filter(id=recording.id).update(
            status=status,
            file_url=file_url,
            failure_code=failure_code,
            stopped_at=recording.stopped_at or Now(),
        )
        if file_url:
            media_event(recording.call, RealtimeDispatchKind.RECORDING_AVAILABLE, recording.id)
        else:
            media_event(recording.call, RealtimeDispatchKind.RECORDING_FAILED, recording.id)
    recording.refresh_from_db()
    return recording
