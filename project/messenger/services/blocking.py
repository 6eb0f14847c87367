"""The blacklist's rule, which every use case that reaches another user applies: a user
someone blocked cannot reach them (open or post into a direct chat with them, call them,
invite them to a conference, add them to a chat). Refused with a 403 before anything is
written, so no outbox row exists and the blocker is told nothing."""

from collections.abc import Iterable
from uuid import UUID

from ..models import BlacklistEntry
from .errors import Forbidden

BLOCKED = "{action}: this user does not accept it from you"


def blocked_by(user_id: UUID, others: Iterable[UUID]) -> bool:
    """Whether any of `others` has blocked `user_id` (one query)."""
    return BlacklistEntry.objects.filter(
        owner_id__in=list(others), blocked_user_id=user_id, is_active=True
    ).exists()


def refuse_if_blocked(actor_id: UUID, others: Iterable[UUID], action: str) -> None:
    """Forbidden unless none of `others` has blocked the actor."""
    wanted = [other for other in others if other != actor_id]
    if wanted and blocked_by(actor_id, wanted):
        raise Forbidden(BLOCKED.format(action=action))
