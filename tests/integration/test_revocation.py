"""Revocation in the host's domain: what stamps it, what it refuses (tokens by `iat`,
Django sessions by their auth hash), and that a deleted user's memberships change their
chats' membership versions like any removal."""

from typing import Any

import pytest
from django.test import Client

from project.messenger import services
from project.messenger.models import Chat, User
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for

pytestmark = pytest.mark.django_db


def chats_as(client: Client, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return int(client.get("/api/chats", headers=headers).status_code)


def stamp(user: Any) -> Any:
    return User.objects.get(id=user.id).credentials_revoked_at


def test_saving_a_user_stamps_a_revocation_only_when_it_revokes() -> None:
    user = UserFactory()
    user.display_name = "renamed"
    user.save()
    user.save(update_fields=["last_login"])  # as a sign-in does
    assert stamp(user) is None
    user.set_password("another")
    user.save(update_fields=["password"])
    changed = stamp(user)
    assert changed is not None
    user.is_active = False
    user.save()
    assert stamp(user) > changed


def test_a_revocation_ends_the_users_django_sessions_and_older_tokens() -> None:
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    old_token = token_for(user.id)
    assert chats_as(browser) == 200 and chats_as(Client(), old_token) == 200
    services.revocation.log_out_everywhere(user.id)
    assert chats_as(browser) == 401  # the session's auth hash no longer matches
    assert chats_as(Client(), old_token) == 401
    assert chats_as(Client(), token_for(user.id)) == 200  # issued after: fine


def test_deleting_a_user_raises_their_chats_membership_versions() -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id], title="team")
    before = Chat.objects.get(id=chat.id).membership_version
    User.objects.get(id=bob.id).delete()
    assert Chat.objects.get(id=chat.id).membership_version > before
    assert set(chat.participants.values_list("user_id", flat=True)) == {alice.id, carol.id}


def test_djangos_rehash_of_a_password_at_sign_in_revokes_nothing(settings: Any) -> None:
    user = UserFactory()
    user.set_password("the same password")
    user.save()
    stamped = stamp(user)
    # A stronger hasher setting: the next check_password() re-hashes and saves.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]
    user = User.objects.get(id=user.id)
    old_hash = user.password
    assert user.check_password("the same password")
    assert User.objects.get(id=user.id).password != old_hash  # re-hashed and saved
    assert stamp(user) == stamped
