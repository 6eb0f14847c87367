"""Support staff: who is in the "Realtime support" group (migration 0006), which lets a
person see the outbox in the admin and requeue or quarantine rows, and nothing else.

Granting also sets "Staff status" (the admin lets in staff only); revoking leaves it,
since a person may be staff for other reasons. `manage.py realtime_support` and the
tests call these; the admin's Users page does the same by hand.
"""

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

SUPPORT_GROUP = "Realtime support"  # as migration 0006 names it


class SupportAccessError(Exception):
    """A user or the group is missing: the message says which and what to do."""


@dataclass(frozen=True)
class Change:
    username: str
    changed: bool  # False: it already was so


def _user(username: str) -> Any:
    """The host's user (AUTH_USER_MODEL) whose USERNAME_FIELD is `username`."""
    model = get_user_model()
    try:
        return model._default_manager.get_by_natural_key(username)
    except model.DoesNotExist:
        raise SupportAccessError(
            f"no user {username!r}: create the account first (the admin's Users -> Add "
            "user, or python manage.py createsuperuser for an administrator)"
        ) from None


def _group() -> Group:
    try:
        return Group.objects.get(name=SUPPORT_GROUP)
    except Group.DoesNotExist:
        raise SupportAccessError(
            f"no group {SUPPORT_GROUP!r}: run python manage.py migrate (migration "
            "messenger_realtime.0006 creates it)"
        ) from None


@transaction.atomic
def grant(username: str) -> Change:
    """Put the user in the group and make them staff (the admin admits staff only)."""
    group, user = _group(), _user(username)
    already = bool(user.is_staff) and user.groups.filter(pk=group.pk).exists()
    if not already:
        user.groups.add(group)
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return Change(username, changed=not already)


@transaction.atomic
def revoke(username: str) -> Change:
    """Take the user out of the group (Staff status stays as it is)."""
    group, user = _group(), _user(username)
    member = user.groups.filter(pk=group.pk).exists()
    user.groups.remove(group)
    return Change(username, changed=member)


def members() -> list[str]:
    """The group's members' usernames, sorted."""
    model = get_user_model()
    field = model.USERNAME_FIELD
    names = model._default_manager.filter(groups=_group()).values_list(field, flat=True)
    return sorted(str(name) for name in names)
