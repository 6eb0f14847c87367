"""DELIVERY_DEADLINES may name only kinds that may expire (E015, outbox/checks.py): a
deadline on a message kind would drop messages, so the worker refuses it."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from messenger_realtime.conf.settings import load_options
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.outbox.checks import check_delivery_deadlines, expiry_problem
from messenger_realtime.outbox.enums import EXPIRABLE_KINDS, URGENT_KINDS
from messenger_realtime.outbox.enums import RealtimeDispatchKind as Kind
from tests.support.helpers import RecordingPublisher


def test_expirable_kinds_are_media_kinds_only_and_cover_the_urgent_ones() -> None:
    assert all(isinstance(kind, Kind) for kind in EXPIRABLE_KINDS)
    assert set(URGENT_KINDS) <= EXPIRABLE_KINDS
    assert not {Kind.MESSAGE_RECEIVED, Kind.READ_RECEIPT_UPDATED, Kind.CHAT_UPDATED} & (
        EXPIRABLE_KINDS
    )


def test_a_deadline_on_a_message_kind_is_error_e015_naming_the_kind() -> None:
    assert expiry_problem({"CallInvited": 45.0}) is None
    with override_settings(MESSENGER_REALTIME={"DELIVERY_DEADLINES": {"MessageReceived": 5.0}}):
        [error] = check_delivery_deadlines()
    assert error.id == "messenger_realtime.E015"
    assert "MessageReceived" in error.msg and "may not expire" in error.msg
    assert check_delivery_deadlines() == []  # the defaults


def test_a_dispatcher_refuses_a_deadline_on_a_message_kind() -> None:
    options = load_options(delivery_deadlines={"MessageEdited": 5.0})
    with pytest.raises(ImproperlyConfigured, match="MessageEdited"):
        Dispatcher(options, RecordingPublisher())
