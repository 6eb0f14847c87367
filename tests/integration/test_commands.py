"""The ops commands: realtime_token and realtime_disconnect."""

import io
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.credentials.tokens import read_access_token
from tests.support.factories import UserFactory


def test_realtime_token_prints_a_token_the_hub_accepts() -> None:
    user = uuid.uuid4()
    out = io.StringIO()
    call_command("realtime_token", str(user), "--lifetime", "60", stdout=out)
    assert read_access_token(out.getvalue().strip(), load_hub_options()).user_id == user


@pytest.mark.parametrize(
    ("args", "reason"),
    [(["not-a-uuid"], "not a user id"), ([str(uuid.uuid4()), "--lifetime", "0"], "lifetime")],
)
def test_realtime_token_refuses_bad_input(args: list[str], reason: str) -> None:
    with pytest.raises(CommandError, match=reason):
        call_command("realtime_token", *args)


@pytest.mark.django_db
def test_realtime_token_by_username_is_a_token_for_that_users_id() -> None:
    alice = UserFactory(username="demo-alice")
    out = io.StringIO()
    call_command("realtime_token", "--username", "demo-alice", stdout=out)
    assert read_access_token(out.getvalue().strip(), load_hub_options()).user_id == alice.id


@pytest.mark.django_db
def test_realtime_token_for_an_unknown_username_names_the_field_and_similar_names() -> None:
    UserFactory(username="demo-alice")
    with pytest.raises(CommandError) as refused:
        call_command("realtime_token", "--username", "alice")
    assert str(refused.value) == (
        "no user with username 'alice' (messenger.User); similar: demo-alice"
    )
    with pytest.raises(CommandError, match=r"^no user with username 'nobody' \(messenger.User\)$"):
        call_command("realtime_token", "--username", "nobody")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ([], "one of the arguments user_id --username is required"),
        ([str(uuid.uuid4()), "--username", "bob"], "--username: not allowed with argument user_id"),
    ],
)
def test_realtime_token_wants_exactly_one_of_user_id_and_username(
    args: list[str], reason: str
) -> None:
    with pytest.raises(CommandError, match=reason):
        call_command("realtime_token", *args)


def test_realtime_disconnect_refuses_a_bad_user_id() -> None:
    with pytest.raises(CommandError, match="not a user id"):
        call_command("realtime_disconnect", "alice")
