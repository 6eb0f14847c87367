"""Support's admin and the ops command: find a quarantined incident and requeue it."""

import io

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from messenger_realtime.dispatch import connections as db
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox import operations as services
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger.models import User
from tests.support.factories import LAYER_DOWN, OutboxEntryFactory, UserFactory
from tests.support.helpers import options

pytestmark = pytest.mark.usefixtures("transactional_db")
URL = "/admin/messenger_realtime/realtimeoutboxentry/"
MAX = options().max_attempts  # the attempts of a quarantined row (OutboxEntryFactory)


def incident(n: int, error: str) -> list[RealtimeOutboxEntry]:
    """`n` rows quarantined with the same last_error."""
    return OutboxEntryFactory.create_batch(n, quarantined=True, last_error=error)


def staff(*perms: str) -> Client:
    """A logged-in support user who may view the outbox and has `perms`."""
    user = UserFactory(
        name="support", is_staff=True, permissions=["view_realtimeoutboxentry", *perms]
    )
    client = Client()
    client.force_login(user)
    return client


def state(rows: list[RealtimeOutboxEntry]) -> list[tuple[str, int]]:
    return [
        (r.status, r.attempts)
        for r in RealtimeOutboxEntry.objects.filter(id__in=[x.id for x in rows]).order_by("id")
    ]


def test_support_finds_an_incident_and_requeues_it_after_confirming() -> None:
    outage = incident(3, LAYER_DOWN)
    other = incident(1, "EntityNotFound: MessageReceived refers to a missing messages")
    pending = OutboxEntryFactory()
    client = staff("requeue_realtimeoutboxentry")

    listing = client.get(URL).content.decode()
    assert "redis.exceptions.ConnectionError (code #) (3)" in listing  # the incident filter
    page = client.get(URL, {"incident": "redis.exceptions.ConnectionError (code #)"})
    assert page.context["cl"].result_count == 3

    selected = [str(r.id) for r in outage] + [str(pending.id)]
    ask = client.post(URL, {"action": "requeue", "_selected_action": selected})
    assert ask.status_code == 200 and b"Yes, requeue" in ask.content
    assert state(outage) == [(Status.QUARANTINED, MAX)] * 3  # nothing before confirming

    with psycopg.connect(db.conninfo(), autocommit=True) as listener:
        listener.execute("LISTEN realtime_outbox")
        done = client.post(
            URL, {"action": "requeue", "_selected_action": selected, "post": "yes"}, follow=True
        )
        woke = [n.channel for n in listener.notifies(timeout=2, stop_after=1)]
    assert woke == ["realtime_outbox"]
    text = " ".join(str(m) for m in done.context["messages"])
    assert "Requeued 3 of 4 selected rows. 1 not Quarantined" in text
    assert state(outage) == [(Status.PENDING, 0)] * 3
    assert state(other) == [(Status.QUARANTINED, MAX)]
    requeued = RealtimeOutboxEntry.objects.get(id=outage[0].id)
    assert requeued.last_error == LAYER_DOWN  # kept


def test_without_the_permission_the_action_is_neither_offered_nor_performed() -> None:
    rows = incident(2, "boom")
    client = staff()  # view only
    listing = client.get(URL)
    assert listing.status_code == 200
    assert listing.context["action_form"] is None  # no action is offered at all
    client.post(
        URL, {"action": "requeue", "_selected_action": [str(r.id) for r in rows], "post": "yes"}
    )
    assert state(rows) == [(Status.QUARANTINED, MAX)] * 2


def test_quarantine_action_sets_pending_rows_aside() -> None:
    row = OutboxEntryFactory()
    client = staff("quarantine_realtimeoutboxentry")
    client.post(URL, {"action": "quarantine", "_selected_action": [str(row.id)], "post": "yes"})
    stored = RealtimeOutboxEntry.objects.get(id=row.id)
    operator = User.objects.get(is_staff=True).username
    assert (stored.status, stored.last_error) == (
        Status.QUARANTINED,
        services.manual_quarantine_error(operator),
    )


def test_rows_are_read_only_and_searchable_by_any_id() -> None:
    row = OutboxEntryFactory()
    client = staff("requeue_realtimeoutboxentry", "quarantine_realtimeoutboxentry")
    found = client.get(URL, {"q": str(row.message_id)})
    assert found.context["cl"].result_count == 1
    assert client.get(f"{URL}add/").status_code == 403
    detail = client.post(f"{URL}{row.id}/change/", {"status": Status.DONE})
    assert detail.status_code == 403  # viewing is allowed, changing never
    assert RealtimeOutboxEntry.objects.get(id=row.id).status == Status.PENDING


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("realtime_outbox", *args, stdout=out)
    return out.getvalue()


def test_ops_command_lists_incidents_and_requeues_by_fingerprint_kind_or_ids() -> None:
    outage = incident(2, LAYER_DOWN)
    other = incident(1, "EntityNotFound: x")
    assert "2  redis.exceptions.ConnectionError (code #)" in run("incidents")
    fp = "redis.exceptions.ConnectionError (code #)"  # LAYER_DOWN with its code blanked
    assert run("requeue", "--fingerprint", fp, "--dry-run") == "would requeue 2 rows\n"
    assert run("requeue", "--fingerprint", fp) == "requeued 2 rows (of 2 matching)\n"
    assert state(outage) == [(Status.PENDING, 0)] * 2 and state(other) == [
        (Status.QUARANTINED, MAX)
    ]
    assert run("requeue", "--ids", str(other[0].id)) == "requeued 1 rows (of 1 matching)\n"
    since = ("--since", "2000-01-01T00:00:00+00:00")
    assert run("quarantine", "--kind", "MessageReceived", *since) == (
        "quarantined 3 rows (of 3 matching)\n"
    )
    assert {s for s, _ in state(outage + other)} == {Status.QUARANTINED}


def test_ops_command_incidents_groups_errors_alike_but_for_ids_and_numbers_largest_first() -> None:
    incident(1, "EntityNotFound: 01a22b4a-a5cb-749d-a4de-425e3ae7495a in 42 ms")
    incident(1, "EntityNotFound: 7f3e9c10-2b4d-4e6f-8a1b-3c5d7e9f0a2b in 7 ms")
    incident(1, "boom")
    assert run("incidents") == "       2  EntityNotFound: # in # ms\n       1  boom\n"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["requeue"], "at least one filter"),
        (["requeue", "--ids", "x"], "UUIDs"),
        (["requeue", "--since", "yesterday"], "ISO 8601"),
        (["requeue", "--since", "2026-01-01T00:00:00"], "time zone"),
    ],
)
def test_ops_command_refuses_unclear_requests(args: list[str], reason: str) -> None:
    with pytest.raises(CommandError, match=reason):
        run(*args)


# A host's TEMPLATES as `startproject` writes them: no DIRS, the apps' own templates only.
STARTPROJECT_TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]


def test_requeue_asks_for_confirmation_in_a_host_without_this_repository_s_templates(
    settings: object,
) -> None:
    # Another project's settings: the confirmation page must come from the app's package.
    settings.TEMPLATES = STARTPROJECT_TEMPLATES  # type: ignore[attr-defined]
    rows = incident(1, "ConfirmationPage")  # an incident of its own (rows stay committed)
    client = staff("requeue_realtimeoutboxentry")
    ask = client.post(URL, {"action": "requeue", "_selected_action": [str(rows[0].id)]})
    assert ask.status_code == 200 and b"Yes, requeue" in ask.content
