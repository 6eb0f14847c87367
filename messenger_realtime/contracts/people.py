"""Personal contracts to user:{UserId}: contact requests and the blacklist (non-PII ids)."""

from messenger_realtime.contracts.base import (
    Contract,
    Payload,
    ids,
    iso,
    no_session_kind,
    require_user,
)
from messenger_realtime.contracts.events import OutboxRow
from messenger_realtime.contracts.port import BlacklistView, ContactView
from messenger_realtime.outbox.enums import RealtimeDispatchKind as K


def _contact(row: OutboxRow, c: ContactView, other: str) -> Payload:
    return {
        **ids(contactId=c.id, userId=getattr(c, other)),
        "status": c.status,
        "at": iso(c.updated_at),
    }


def contact_request_received(row: OutboxRow, c: ContactView) -> Payload:
    no_session_kind(row)
    require_user(row, c.addressee_user_id)
    return _contact(row, c, "requester_user_id")


def contact_request_accepted(row: OutboxRow, c: ContactView) -> Payload:
    no_session_kind(row)
    require_user(row, c.requester_user_id)
    return _contact(row, c, "addressee_user_id")


def contact_removed(row: OutboxRow, c: ContactView) -> Payload:
    no_session_kind(row)
    target = require_user(row, c.requester_user_id, c.addressee_user_id)
    other = "addressee_user_id" if target == c.requester_user_id else "requester_user_id"
    return _contact(row, c, other)


def blacklist_changed(row: OutboxRow, b: BlacklistView) -> Payload:
    """Only the owner's own devices learn of it; the blocked user is never told."""
    no_session_kind(row)
    require_user(row, b.owner_user_id)
    return {
        **ids(blacklistEntryId=b.id, blockedUserId=b.blocked_user_id),
        "blocked": b.is_active,
        "at": iso(b.updated_at),
    }


CONTRACTS: dict[str, Contract] = {
    K.CONTACT_REQUEST_RECEIVED: Contract("ref_id", contact_request_received),
    K.CONTACT_REQUEST_ACCEPTED: Contract("ref_id", contact_request_accepted),
    K.CONTACT_REMOVED: Contract("ref_id", contact_removed),
    K.BLACKLIST_CHANGED: Contract("ref_id", blacklist_changed),
}
