"""Chats and membership. Each use case: domain change + outbox rows, one transaction."""

from collections.abc import Iterable
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from messenger_realtime import outbox
from messenger_realtime.backplane.control import membership_changed
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind

from ..models import Chat, ChatEvent, Participant, User
from .blocking import refuse_if_blocked
from .errors import Conflict, InvalidInput, NotFound

MAX_TITLE = 200
DIRECT_IS_TWO = "a direct chat has exactly its two members; start a group chat instead"


def active_participant(chat_id: UUID, user_id: UUID) -> Participant:
    """The caller's active participation; a non-participant learns nothing (404)."""
    try:
        return Participant.objects.get(chat_id=chat_id, user_id=user_id, is_active=True)
    except Participant.DoesNotExist as exc:
        raise NotFound("chat not found") from exc


def _chat_updated(
    chat_id: UUID,
    kind: str,
    actor_id: UUID | None,
    *,
    subject_id: UUID | None = None,
    title: str = "",
    notify: Iterable[UUID] = (),
) -> ChatEvent:
    """A feed entry, ChatUpdated for the chat's group and for each user in `notify`."""
    event = ChatEvent.objects.create(
        chat_id=chat_id, kind=kind, actor_id=actor_id, subject_user_id=subject_id, title=title
    )
    intents = [
        OutboxIntent(
            RealtimeDispatchKind.CHAT_UPDATED,
            RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id,
            ref_id=event.id,
        )
    ]
    intents += [
        OutboxIntent(
            RealtimeDispatchKind.CHAT_UPDATED,
            RealtimeTargetKind.USER,
            chat_id=chat_id,
            target_user_id=uid,
            ref_id=event.id,
        )
        for uid in notify
    ]
    outbox.enqueue_many(intents)
    return event


def _membership_changed(chat_id: UUID) -> None:
    """Bump the chat's membership version, in the transaction that changes a participant:
    the hub then re-reads memberships before delivering anything read after the change."""
    Chat.objects.filter(id=chat_id).update(membership_version=F("membership_version") + 1)


def _direct(chat_id: UUID) -> bool:
    """Whether the chat is a direct one, read under its row lock: its kind and members
    are then settled for the rest of the transaction."""
    kind = Chat.objects.select_for_update().values_list("kind", flat=True).get(id=chat_id)
    return bool(kind == Chat.Kind.DIRECT)


def _existing_users(user_ids: Iterable[UUID]) -> list[UUID]:
    wanted = list(dict.fromkeys(user_ids))
    found = set(User.objects.filter(id__in=wanted, is_active=True).values_list("id", flat=True))
    missing = [str(u) for u in wanted if u not in found]
    if missing:
        raise InvalidInput(f"unknown users: {', '.join(missing)}")
    return wanted


def create_chat(creator_id: UUID, member_ids: Iterable[UUID], title: str = "") -> Chat:
    if len(title) > MAX_TITLE:
        raise InvalidInput(f"title is longer than {MAX_TITLE} characters")
    members = _existing_users([creator_id, *member_ids])
    if len(members) < 2:
        raise InvalidInput("a chat needs at least one other member")
    kind = Chat.Kind.DIRECT if len(members) == 2 and not title else Chat.Kind.GROUP
    refuse_if_blocked(creator_id, members, "a chat with them")
    with transaction.atomic():
        chat = Chat.objects.create(title=title, kind=kind)
        Participant.objects.bulk_create(
            [Participant(chat=chat, user_id=uid, took_part=uid == creator_id) for uid in members]
        )
        _chat_updated(chat.id, ChatEvent.Kind.CREATED, creator_id, title=title, notify=members)
        membership_changed(*members)
    return chat


def accept_chat(user_id: UUID, chat_id: UUID) -> Participant:
    """The member accepts a chat someone put them in without writing in it: the others
    may see their presence from now on, as after their first message (took_part)."""
    with transaction.atomic():
        participant = active_participant(chat_id, user_id)
        if not participant.took_part:
            participant.took_part = True
            participant.save(update_fields=["took_part"])
    return participant


def rename_chat(actor_id: UUID, chat_id: UUID, title: str) -> Chat:
    if not title.strip() or len(title) > MAX_TITLE:
        raise InvalidInput(f"title must be 1-{MAX_TITLE} characters")
    with transaction.atomic():
        active_participant(chat_id, actor_id)
        # A direct chat stays the two people's: a title would not make it a group.
        if _direct(chat_id):
            raise Conflict("a direct chat has no title; start a group chat instead")
        Chat.objects.filter(id=chat_id).update(title=title, updated_at=Now())
        chat = Chat.objects.get(id=chat_id)
        _chat_updated(chat_id, ChatEvent.Kind.TITLE_CHANGED, actor_id, title=title)
    return chat


def add_participant(actor_id: UUID, chat_id: UUID, user_id: UUID) -> Participant:
    _existing_users([user_id])
    with transaction.atomic():
        active_participant(chat_id, actor_id)
        if _direct(chat_id):
            raise Conflict(DIRECT_IS_TWO)
        refuse_if_blocked(actor_id, [user_id], "adding them to a chat")
        participant, _ = Participant.objects.update_or_create(
            chat_id=chat_id, user_id=user_id, defaults={"is_active": True}
        )
        _membership_changed(chat_id)
        _chat_updated(
            chat_id,
            ChatEvent.Kind.PARTICIPANT_ADDED,
            actor_id,
            subject_id=user_id,
            notify=[user_id],
        )
        membership_changed(user_id)
    return participant


def remove_participant(actor_id: UUID, chat_id: UUID, user_id: UUID) -> None:
    with transaction.atomic():
        active_participant(chat_id, actor_id)
        if _direct(chat_id):
            raise Conflict(DIRECT_IS_TWO)
        removed = Participant.objects.filter(
            chat_id=chat_id, user_id=user_id, is_active=True
        ).update(is_active=False)
        if not removed:
            raise NotFound("participant not found")
        _membership_changed(chat_id)
        _chat_updated(
            chat_id,
            ChatEvent.Kind.PARTICIPANT_REMOVED,
            actor_id,
            subject_id=user_id,
            notify=[user_id],
        )
        membership_changed(user_id)


def mark_read(user_id: UUID, chat_id: UUID, seq: int) -> Participant:
    """Move the read marker forward (never back); ReadReceiptUpdated when it moves."""
    with transaction.atomic():
        participant = active_participant(chat_id, user_id)
        last_seq = Chat.objects.values_list("last_seq", flat=True).get(id=chat_id)
        if not 0 <= seq <= last_seq:
            raise InvalidInput(f"seq must be between 0 and {last_seq}")
        moved = Participant.objects.filter(id=participant.id, last_read_seq__lt=seq).update(
            last_read_seq=seq
        )
        if moved:
            participant.last_read_seq = seq
            outbox.enqueue(
                RealtimeDispatchKind.READ_RECEIPT_UPDATED,
                chat_id=chat_id,
                ref_id=participant.id,
                seq=None,
            )
    return participant
