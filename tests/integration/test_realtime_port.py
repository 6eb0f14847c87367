"""The host's DomainPort: views built by field name from the host's rows."""

import dataclasses
import uuid
from typing import Any

import pytest
from django.utils import timezone

from messenger_realtime.contracts.port import MessageView, UserStanding
from project.messenger import services
from project.messenger.models import Message, User
from project.messenger.realtime_port import MESSAGE_VIEW_COLUMNS, HostDomainPort
from tests.support.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_port_reads_messages_by_column_name_in_one_statement(
    django_assert_num_queries: Any,
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    assert list(MESSAGE_VIEW_COLUMNS) == [f.name for f in dataclasses.fields(MessageView)]
    sent = services.post_message(alice.id, chat.id, kind="File", file_meta={"name": "a.png"})
    text = services.post_message(alice.id, chat.id, "hello")
    with django_assert_num_queries(1):
        views = HostDomainPort().messages([sent.id, text.id])
    assert views == {
        m.id: MessageView(
            id=m.id,
            chat_id=chat.id,
            seq=m.seq,
            sender_user_id=alice.id,
            kind=m.kind,
            sent_at=Message.objects.get(id=m.id).sent_at,
            body=m.body,
            file_meta=m.file_meta,
            card_text="",
            edited_at=None,
            deleted_at=None,
        )
        for m in (sent, text)
    }


def test_every_participant_change_raises_the_chats_membership_version_in_one_read(
    django_assert_num_queries: Any,
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")
    other = services.create_chat(alice.id, [carol.id])
    port = HostDomainPort()
    with django_assert_num_queries(1):
        assert port.membership_versions([chat.id, other.id]) == {chat.id: 0, other.id: 0}
    services.add_participant(alice.id, chat.id, carol.id)
    services.remove_participant(alice.id, chat.id, bob.id)
    services.rename_chat(alice.id, chat.id, "renamed")  # not a membership change
    with django_assert_num_queries(1):
        assert port.active_chats(carol.id) == {chat.id: 2, other.id: 0}
    assert port.active_chats(bob.id) == {}
    assert port.membership_versions([chat.id]) == {chat.id: 2}


def test_a_connects_standing_and_chats_are_one_statement_and_the_two_reads_answer(
    django_assert_num_queries: Any,
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")
    other = services.create_chat(alice.id, [bob.id, carol.id], title="more")
    services.remove_participant(alice.id, other.id, carol.id)  # carol: in no chat now
    revoked = User.objects.get(id=bob.id)
    revoked.credentials_revoked_at = timezone.now()
    revoked.save(update_fields=["credentials_revoked_at"])
    User.objects.filter(id=carol.id).update(is_active=False)
    port = HostDomainPort()
    for user in (alice.id, bob.id, carol.id, uuid.uuid4()):  # the last one: unknown
        with django_assert_num_queries(1):
            together = port.standing_and_chats(user)
        assert together == (port.user_standing(user), port.active_chats(user))
    standing, chats = port.standing_and_chats(bob.id)
    assert standing.active and standing.revoked_at is not None
    assert chats == {chat.id: 0, other.id: 1}
    assert port.standing_and_chats(carol.id) == (UserStanding(False), {})
