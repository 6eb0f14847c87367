"""`seed_demo` prints the demo users' and chats' ids: what a newcomer needs to mint a
token (`realtime_token --username`) and to open a chat with a client."""

import io
import re

import pytest
from django.core.management import call_command

from project.messenger.models import Chat, User

pytestmark = pytest.mark.django_db


def seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_prints_each_demo_users_id_and_username_and_each_chats_id() -> None:
    printed = seed()
    for user in User.objects.filter(username__startswith="demo-"):
        assert re.search(rf"^  {user.id}  {user.username} +{user.display_name}$", printed, re.M)
    team = Chat.objects.get(title="Demo team")
    direct = Chat.objects.get(kind=Chat.Kind.DIRECT)
    assert f"  {team.id}  Demo team  (demo-alice, demo-bob, demo-carol)\n" in printed
    assert f"  {direct.id}  Direct chat  (demo-alice, demo-bob)\n" in printed
    assert "python manage.py realtime_token --username demo-alice" in printed


def test_seed_demo_run_again_creates_nothing_and_prints_the_same_ids() -> None:
    first = seed()
    assert seed() == first
    assert (User.objects.count(), Chat.objects.count()) == (3, 2)
