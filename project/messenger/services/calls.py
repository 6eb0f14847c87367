"""Media sessions: 1:1 calls (Direct), chat conferences (Conference), participants,
screen share and recordings. Direct events go to the parties' user groups, conference
events to the chat group; the SessionKind on each row says which contract applies."""

from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from messenger_realtime import outbox
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind
from messenger_realtime.uuid7 import uuid7

from ..models import CallParticipant, CallSession, Chat, Participant
from .blocking import refuse_if_blocked
from .chats import active_participant
from .errors import Conflict, Forbidden, InvalidInput, NotFound


def media_event(call: CallSession, kind: str, ref_id: UUID, to: Iterable[UUID] = ()) -> None:
    """Outbox rows for a media event: Direct -> each user in `to` (default: both
    parties); Conference -> the chat group."""
    if call.session_kind == CallSession.Kind.CONFERENCE:
        outbox.enqueue(
            kind, chat_id=call.chat_id, ref_id=ref_id, session_kind=CallSession.Kind.CONFERENCE
        )
        return
    users: list[UUID | None] = list(to) or [call.initiator_id, call.callee_id]
    outbox.enqueue_many(
        OutboxIntent(
            kind,
            RealtimeTargetKind.USER,
            chat_id=call.chat_id,
            target_user_id=uid,
            ref_id=ref_id,
            session_kind=CallSession.Kind.DIRECT,
        )
        for uid in users
        if uid is not None
    )


def session_of(user_id: UUID, call_id: UUID, *, lock: bool = True) -> CallSession:
    """A session the user may see: a party of a Direct call, a member of the chat."""
    rows = CallSession.objects.select_for_update() if lock else CallSession.objects
    try:
        call = rows.get(id=call_id)
    except CallSession.DoesNotExist as exc:
        raise NotFound("call not found") from exc
    is_direct = call.session_kind == CallSession.Kind.DIRECT
    if is_direct and user_id not in (call.initiator_id, call.callee_id):
        raise NotFound("call not found")
    if not Participant.objects.filter(
        chat_id=call.chat_id, user_id=user_id, is_active=True
    ).exists():
        raise NotFound("call not found")
    return call


def no_live_call(chat_id: UUID) -> None:
    """Refuse a second ringing or active session in one chat."""
    live = [CallSession.Status.RINGING, CallSession.Status.ACTIVE]
    if CallSession.objects.filter(chat_id=chat_id, status__in=live).exists():
        raise Conflict("a call is already going on in this chat")


def require_status(call: CallSession, status: str) -> None:
    """Refuse a change the call's current status does not allow."""
    if call.status != status:
        raise Conflict(f"the call is {call.status}")


def start_call(caller_id: UUID, chat_id: UUID) -> CallSession:
    """Ring the other member of a direct chat."""
    with transaction.atomic():
        active_participant(chat_id, caller_id)
        chat = Chat.objects.get(id=chat_id)
        others = list(
            Participant.objects.filter(chat_id=chat_id, is_active=True)
            .exclude(user_id=caller_id)
            .values_list("user_id", flat=True)
        )
        if chat.kind != Chat.Kind.DIRECT or len(others) != 1:
            raise InvalidInput("1:1 calls happen in a direct chat; use a conference here")
        refuse_if_blocked(caller_id, others, "a call to them")
        no_live_call(chat_id)
        call = CallSession.objects.create(
            session_kind=CallSession.Kind.DIRECT,
            chat_id=chat_id,
            room_name=f"call-{uuid7().hex}",
            status=CallSession.Status.RINGING,
            initiator_id=caller_id,
            callee_id=others[0],
        )
        media_event(call, RealtimeDispatchKind.CALL_INVITED, call.id, to=[others[0]])
    return call


def answer_call(user_id: UUID, call_id: UUID) -> CallSession:
    """The callee picks up a ringing call; both parties join it."""
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if user_id != call.callee_id:
            raise Forbidden("only the callee answers")
        require_status(call, CallSession.Status.RINGING)
        CallSession.objects.filter(id=call.id).update(
            status=CallSession.Status.ACTIVE, answered_at=Now()
        )
        call.refresh_from_db()
        CallParticipant.objects.bulk_create(
            [CallParticipant(call=call, user_id=uid) for uid in (call.initiator_id, call.callee_id)]
        )
        media_event(call, RealtimeDispatchKind.CALL_ANSWERED, call.id)
    return call


def _stop_ringing(call: CallSession, user_id: UUID, status: str) -> None:
    """A ringing call ends unanswered (declined or cancelled) by `user_id`."""
    require_status(call, CallSession.Status.RINGING)
    CallSession.objects.filter(id=call.id).update(
        status=status, ended_at=Now(), ended_by_id=user_id
    )
    call.refresh_from_db()


def decline_call(user_id: UUID, call_id: UUID) -> CallSession:
    """The callee turns a ringing call down."""
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if user_id != call.callee_id:
            raise Forbidden("only the callee may do that")
        _stop_ringing(call, user_id, CallSession.Status.DECLINED)
        media_event(call, RealtimeDispatchKind.CALL_DECLINED, call.id)
    return call


def cancel_call(user_id: UUID, call_id: UUID) -> CallSession:
    """The caller stops ringing before an answer."""
    with transaction.atomic():
        call = session_of(user_id, call_id)
        if user_id != call.initiator_id:
            raise Forbidden("only the caller may do that")
        _stop_ringing(call, user_id, CallSession.Status.CANCELLED)
        media_event(call, RealtimeDispatchKind.CALL_CANCELLED, call.id)
    return call


def end_session(user_id: UUID, call_id: UUID) -> CallSession:
    """Hang up a 1:1 call (CallEnded) or end a conference (ConferenceEnded)."""
    with transaction.atomic():
        call = session_of(user_id, call_id)
        require_status(call, CallSession.Status.ACTIVE)
        CallSession.objects.filter(id=call.id).update(
            status=CallSession.Status.ENDED, ended_at=Now(), ended_by_id=user_id
        )
        call.refresh_from_db()
        CallParticipant.objects.filter(call=call, left_at__isnull=True).update(left_at=Now())
        if call.session_kind == CallSession.Kind.DIRECT:
            media_event(call, RealtimeDispatchKind.CALL_ENDED, call.id)
        else:
            media_event(call, RealtimeDispatchKind.CONFERENCE_ENDED, call.id)
    return call


def reap_missed_calls(ring_timeout_seconds: float) -> int:
    """The call-timeout reaper: Ringing longer than the timeout (database clock) ->
    Missed, with CallMissed to both parties. Safe to run concurrently (SKIP LOCKED)."""
    reaped = 0
    with transaction.atomic():
        stale = CallSession.objects.select_for_update(skip_locked=True).filter(
            status=CallSession.Status.RINGING,
            session_kind=CallSession.Kind.DIRECT,
            created_at__lte=Now() - timedelta(seconds=ring_timeout_seconds),
        )
        for call in stale:
            CallSession.objects.filter(id=call.id).update(
                status=CallSession.Status.MISSED, ended_at=Now()
            )
            media_event(call, RealtimeDispatchKind.CALL_MISSED, call.id)
            reaped += 1
    return reaped
