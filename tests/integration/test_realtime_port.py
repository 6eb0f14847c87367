"""The host's DomainPort: views built by field name from the host's rows."""

import dataclasses
from typing import Any

import pytest

from messenger_realtime.contracts.port import MessageView
from project.messenger import services
from project.messenger.models import Message
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
