"""What a host implements: optional capabilities cost a host without them nothing (no
port method, no media secret), a kind its port cannot build is refused where it is
written, and the host's user model must have UUID ids (checked at `check`)."""

import uuid
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

from messenger_realtime import outbox
from messenger_realtime.contracts.build import build_events
from messenger_realtime.contracts.checks import check_user_model
from messenger_realtime.contracts.port import DomainPort, port_problem
from messenger_realtime.exceptions import InvalidRow, UnsupportedKind
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import READ_BY, RealtimeDispatchKind, RealtimeTargetKind
from tests.support.factories import UserFactory
from tests.support.ports import ChatsOnlyPort

pytestmark = pytest.mark.django_db
CHATS_ONLY = "tests.support.ports.ChatsOnlyPort"


def host_settings(settings: Any, **values: Any) -> dict[str, Any]:
    return {**settings.MESSENGER_REALTIME, **values}


def check_ids(tags: list[str] | None = None) -> list[str]:
    return sorted(str(m.id) for m in run_checks(tags=tags) if m.id.startswith("messenger_realtime"))


def test_a_chats_only_port_implements_none_of_the_optional_reads() -> None:
    assert port_problem(CHATS_ONLY) is None
    assert all(not ChatsOnlyPort.provides(m) for m in DomainPort.OPTIONAL_READS)
    assert all(ChatsOnlyPort.provides(m) for m in ("messages", "participants", "chat_events"))


def test_a_port_that_forgot_a_required_read_is_named_at_check() -> None:
    assert (
        port_problem("tests.support.ports.HalfPort")
        == "tests.support.ports.HalfPort lacks messages"
    )


def test_a_kind_the_port_cannot_build_is_refused_where_it_is_written(settings: Any) -> None:
    user = UserFactory()
    with override_settings(MESSENGER_REALTIME=host_settings(settings, DOMAIN_PORT=CHATS_ONLY)):
        with pytest.raises(UnsupportedKind) as refused, transaction.atomic():
            outbox.enqueue(
                RealtimeDispatchKind.CALL_INVITED,
                target_kind=RealtimeTargetKind.USER,
                target_user_id=user.id,
                ref_id=uuid.uuid4(),
                session_kind="Direct",
            )
        assert "CallInvited" in str(refused.value) and "calls()" in str(refused.value)
        assert CHATS_ONLY in str(refused.value)
        with transaction.atomic():  # what the port reads is written as always
            outbox.enqueue(
                RealtimeDispatchKind.MESSAGE_RECEIVED, chat_id=uuid.uuid4(), message_id=uuid.uuid4()
            )
    assert list(RealtimeOutboxEntry.objects.values_list("kind", flat=True)) == ["MessageReceived"]


def test_a_row_written_before_the_port_lost_a_read_is_quarantined_naming_it() -> None:
    row = RealtimeOutboxEntry(  # unsaved: the build reads its reference ids only
        kind=RealtimeDispatchKind.CONTACT_REMOVED,
        target_kind=RealtimeTargetKind.USER,
        target_user_id=uuid.uuid4(),
        ref_id=uuid.uuid4(),
    )
    (built,) = build_events([row], ChatsOnlyPort())
    assert isinstance(built, InvalidRow)
    assert str(built) == "Unsupported: ContactRemoved needs DomainPort.contacts()"


def test_every_kind_names_a_read_of_the_port() -> None:
    assert set(READ_BY) == set(RealtimeDispatchKind.values)
    assert all(callable(getattr(DomainPort, method, None)) for method in READ_BY.values())
    optional = {m for m in READ_BY.values() if m in DomainPort.OPTIONAL_READS}
    assert optional == DomainPort.OPTIONAL_READS


def test_media_secrets_are_required_only_by_a_port_that_reads_calls(settings: Any) -> None:
    unset = {"MEDIA_JWT_SIGNING_KEY": "", "TURN_SHARED_SECRET": ""}
    with override_settings(MESSENGER_REALTIME=host_settings(settings, **unset)):
        assert check_ids() == ["messenger_realtime.E012", "messenger_realtime.E012"]
    chats_only = host_settings(settings, DOMAIN_PORT=CHATS_ONLY, **unset)
    with override_settings(MESSENGER_REALTIME=chats_only):
        assert check_ids() == []


def test_a_user_model_with_integer_ids_fails_check_naming_auth_user_model() -> None:
    with override_settings(AUTH_USER_MODEL="auth.User"):
        errors = check_user_model()
    assert [e.id for e in errors] == ["messenger_realtime.E032"]
    assert "AUTH_USER_MODEL (auth.User) has a AutoField primary key" in errors[0].msg
    assert check_ids() == []  # the project's own user model: UUID ids
