"""Contacts (request, accept, remove) and the blacklist."""

from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now

from messenger_realtime import outbox
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind

from ..models import BlacklistEntry, Contact, User
from .errors import Conflict, Forbidden, InvalidInput, NotFound

ALREADY = "a contact or request already exists"


def _user(user_id: UUID) -> User:
    try:
        return User.objects.get(id=user_id, is_active=True)
    except User.DoesNotExist as exc:
        raise NotFound("user not found") from exc


def _blocked(owner_id: UUID, other_id: UUID) -> bool:
    return BlacklistEntry.objects.filter(
        owner_id=owner_id, blocked_user_id=other_id, is_active=True
    ).exists()


def request_contact(requester_id: UUID, addressee_id: UUID) -> Contact:
    if requester_id == addressee_id:
        raise InvalidInput("you cannot add yourself")
    _user(addressee_id)
    with transaction.atomic():
        live = Contact.objects.filter(
            Q(requester_id=requester_id, addressee_id=addressee_id)
            | Q(requester_id=addressee_id, addressee_id=requester_id),
            status__in=[Contact.Status.PENDING, Contact.Status.ACCEPTED],
        )
        if live.exists():
            raise Conflict(ALREADY)
        try:
            with transaction.atomic():  # a savepoint: a lost race leaves the rest usable
                contact = Contact.objects.create(
                    requester_id=requester_id, addressee_id=addressee_id
                )
        except IntegrityError as exc:  # uq_contact_live_pair: a concurrent request won
            raise Conflict(ALREADY) from exc
        if not _blocked(addressee_id, requester_id):  # a blocked requester stays unheard
            outbox.enqueue(
                RealtimeDispatchKind.CONTACT_REQUEST_RECEIVED,
                target_kind=RealtimeTargetKind.USER,
                target_user_id=addressee_id,
                ref_id=contact.id,
            )
    return contact


def _contact_of(user_id: UUID, contact_id: UUID) -> Contact:
    try:
        contact = Contact.objects.select_for_update().get(id=contact_id)
    except Contact.DoesNotExist as exc:
        raise NotFound("contact not found") from exc
    if user_id not in (contact.requester_id, contact.addressee_id):
        raise NotFound("contact not found")
    return contact


def accept_contact(addressee_id: UUID, contact_id: UUID) -> Contact:
    with transaction.atomic():
        contact = _contact_of(addressee_id, contact_id)
        if contact.addressee_id != addressee_id:
            raise Forbidden("only the addressee accepts a request")
        if contact.status != Contact.Status.PENDING:
            raise Conflict(f"the request is {contact.status}")
        Contact.objects.filter(id=contact.id).update(
            status=Contact.Status.ACCEPTED, updated_at=Now()
        )
        outbox.enqueue(
            RealtimeDispatchKind.CONTACT_REQUEST_ACCEPTED,
            target_kind=RealtimeTargetKind.USER,
            target_user_id=contact.requester_id,
            ref_id=contact.id,
        )
    contact.refresh_from_db()
    return contact


def remove_contact(user_id: UUID, contact_id: UUID) -> Contact:
    with transaction.atomic():
        contact = _contact_of(user_id, contact_id)
        if contact.status == Contact.Status.REMOVED:
            raise Conflict("the contact is already removed")
        Contact.objects.filter(id=contact.id).update(
            status=Contact.Status.REMOVED, removed_by_id=user_id, updated_at=Now()
        )
        other = contact.addressee_id if user_id == contact.requester_id else contact.requester_id
        outbox.enqueue(
            RealtimeDispatchKind.CONTACT_REMOVED,
            target_kind=RealtimeTargetKind.USER,
            target_user_id=other,
            ref_id=contact.id,
        )
    contact.refresh_from_db()
    return contact


def set_blocked(owner_id: UUID, user_id: UUID, blocked: bool) -> BlacklistEntry | None:
    """Block or unblock; BlacklistChanged goes to the owner's own devices only. A no-op
    (blocking twice, unblocking someone never blocked) writes nothing and sends nothing."""
    if owner_id == user_id:
        raise InvalidInput("you cannot block yourself")
    _user(user_id)
    with transaction.atomic():
        entry = (
            BlacklistEntry.objects.select_for_update()
            .filter(owner_id=owner_id, blocked_user_id=user_id)
            .first()
        )
        if entry is None and not blocked:
            return None
        if entry is not None and entry.is_active == blocked:
            return entry
        if entry is None:
            entry = BlacklistEntry.objects.create(owner_id=owner_id, blocked_user_id=user_id)
        else:
            BlacklistEntry.objects.filter(id=entry.id).update(is_active=blocked, updated_at=Now())
        outbox.enqueue(
            RealtimeDispatchKind.BLACKLIST_CHANGED,
            target_kind=RealtimeTargetKind.USER,
            target_user_id=owner_id,
            ref_id=entry.id,
        )
    entry.refresh_from_db()
    return entry
