"""Revocation: when a user may no longer be who their credentials say, every credential
issued before now is refused and every open hub connection of theirs is closed.

Happens when support deactivates a user (`is_active = False`, as the admin saves it), a
user is deleted, their password changes, or they (or support) log out everywhere. The
owner's transaction stamps User.credentials_revoked_at (tokens with an older `iat` are
refused at negotiate, upgrade and REST: hub/credentials/tokens.py through the domain port; Django
sessions end because the stamp is part of their auth hash: models.User) and, after it
commits, the hub closes the user's connections on every process without allowReconnect
(backplane/control.credentials_revoked). A deleted user's participant rows go with them:
each such removal raises its chat's membership version like any other (the hub then
re-reads before delivering), and the remaining members' view is unchanged.

The stamp is the application clock's, as the tokens' `iat` it is compared with.
"""

from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.utils import timezone

from messenger_realtime.backplane.control import credentials_revoked, membership_changed

from ..models import Chat, Participant, User

_REVOKE = "_revoke_credentials"  # set on an instance by pre_save, read by post_save


def log_out_everywhere(user_id: UUID) -> None:
    """Refuse every credential the user holds now; their connections close."""
    with transaction.atomic():
        User.objects.filter(id=user_id).update(credentials_revoked_at=timezone.now())
        credentials_revoked(user_id)


def _before_user_saved(sender: Any, instance: User, update_fields: Any = None, **kw: Any) -> None:
    """Stamp the revocation in the same save when it deactivates or changes the password."""
    if instance._state.adding or instance.pk is None:
        return
    if update_fields is not None and not {"is_active", "password"} & set(update_fields):
        return  # e.g. last_login at sign-in: nothing that revokes
    before = User.objects.filter(pk=instance.pk).values_list("is_active", "password").first()
    if before is None:
        return
    was_active, password = before
    # A new password is one set_password() gave in this save (_password holds it until
    # the save ends). Django's own rehash at sign-in (a hasher's new iterations) sets
    # _password back to None before saving: the same password, nobody to log out.
    new_password = (
        password != instance.password and getattr(instance, "_password", None) is not None
    )
    if (was_active and not instance.is_active) or new_password:
        instance.credentials_revoked_at = timezone.now()
        setattr(instance, _REVOKE, True)  # post_save writes it (a partial save too)


def _after_user_saved(sender: Any, instance: User, **kwargs: Any) -> None:
    if getattr(instance, _REVOKE, False):
        setattr(instance, _REVOKE, False)
        User.objects.filter(pk=instance.pk).update(
            credentials_revoked_at=instance.credentials_revoked_at
        )
        credentials_revoked(instance.pk)


def _after_user_deleted(sender: Any, instance: User, **kwargs: Any) -> None:
    credentials_revoked(instance.pk)


def _before_participant_deleted(sender: Any, instance: Participant, **kwargs: Any) -> None:
    """A participant row deleted (its user's deletion cascades here, or the admin): a
    membership change like a removal, so the hub re-reads before delivering."""
    Chat.objects.filter(id=instance.chat_id).update(membership_version=F("membership_version") + 1)
    if instance.is_active:
        membership_changed(instance.user_id)


def connect() -> None:
    """Wire the model signals (MessengerConfig.ready)."""
    pre_save.connect(_before_user_saved, sender=User, dispatch_uid="revocation.pre_save")
    post_save.connect(_after_user_saved, sender=User, dispatch_uid="revocation.post_save")
    post_delete.connect(_after_user_deleted, sender=User, dispatch_uid="revocation.delete")
    pre_delete.connect(
        _before_participant_deleted, sender=Participant, dispatch_uid="revocation.participant"
    )
