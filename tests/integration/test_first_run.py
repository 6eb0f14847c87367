"""An operator's first run (issue 46): `/` says where things are, the documented
createsuperuser signs in to the admin, and `realtime_support grant` gives a person the
"Realtime support" group and the outbox admin (and nothing more)."""

import io
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client

from messenger_realtime.hub.routing import HUB_PATH
from project.messenger.models import User
from tests.support.factories import UserFactory
from tests.support.support_admin import SUPPORT, restore_support_group

OUTBOX_ADMIN = "/admin/messenger_realtime/realtimeoutboxentry/"
PASSWORD = "a long pass phrase for the first run"


def test_the_root_page_names_the_hub_the_admin_and_the_health_probe(settings: Any) -> None:
    settings.DEMO_ENABLED = False
    page = Client().get("/")
    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    text = page.content.decode()
    for path in (f"/{HUB_PATH}", "/admin/", "/health/live", "/api/chats"):
        assert path in text, path
    assert 'href="/demo/"' not in text  # no link to what answers 404
    settings.DEMO_ENABLED = True
    assert 'href="/demo/"' in Client().get("/").content.decode()


def test_the_root_page_answers_head_and_refuses_post() -> None:
    assert Client().head("/").status_code == 200
    assert Client().post("/").status_code == 405


@pytest.mark.django_db
def test_createsuperuser_without_a_prompt_signs_in_to_the_admin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The documented first step: DJANGO_SUPERUSER_PASSWORD and --noinput, no terminal.
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command(
        "createsuperuser",
        "--noinput",
        "--username",
        "admin",
        "--email",
        "ops@example.com",
        stdout=io.StringIO(),
    )
    client = Client()
    assert client.login(username="admin", password=PASSWORD)
    assert client.get("/admin/").status_code == 200
    assert client.get(OUTBOX_ADMIN).status_code == 200


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("realtime_support", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_grant_gives_a_person_the_outbox_admin_and_nothing_more() -> None:
    restore_support_group()
    person = UserFactory(name="agent")
    person.set_password(PASSWORD)
    person.save()
    client = Client()
    assert client.login(username=person.username, password=PASSWORD)
    assert client.get(OUTBOX_ADMIN).status_code == 302  # not staff: to the login page

    said = run("grant", person.username)
    assert person.username in said and SUPPORT in said
    person.refresh_from_db()
    assert person.is_staff and not person.is_superuser
    assert list(person.groups.values_list("name", flat=True)) == [SUPPORT]
    client = Client()
    assert client.login(username=person.username, password=PASSWORD)
    outbox = client.get(OUTBOX_ADMIN)
    assert outbox.status_code == 200
    assert "Select realtime outbox entry" in outbox.content.decode()
    assert client.get("/admin/messenger/user/").status_code == 403  # support, not admin
    assert person.username in run("list")

    assert "already" in run("grant", person.username)  # twice: no change, said so
    run("revoke", person.username)
    person.refresh_from_db()
    assert not person.groups.exists()
    assert client.get(OUTBOX_ADMIN).status_code == 403
    assert person.username not in run("list")


@pytest.mark.django_db
def test_grant_names_an_unknown_user_and_a_missing_group() -> None:
    restore_support_group()
    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("grant", "nobody")
    Group.objects.filter(name=SUPPORT).delete()
    UserFactory(name="agent", username="agent")
    with pytest.raises(CommandError, match=r"python manage\.py migrate"):
        run("grant", "agent")
    assert not User.objects.get(username="agent").is_staff  # nothing half-done
