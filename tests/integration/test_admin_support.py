"""Support at scale: select all over a 5,000-row incident and requeue it in bounded
batches, an audit record per action, the support group, triage columns, facets, the
permanent-error warning, Cancel keeping the filters, and the host's User admin."""

import html
import re
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.test import Client

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger.models import User
from tests.support.factories import LAYER_DOWN, OutboxEntryFactory, UserFactory
from tests.support.support_admin import SUPPORT, bulk_quarantined, restore_support_group

URL = "/admin/messenger_realtime/realtimeoutboxentry/"
OUTAGE = "redis.exceptions.ConnectionError (code #)"  # LAYER_DOWN's fingerprint
SUPPORT_PERMISSIONS = {
    "view_realtimeoutboxentry",
    "requeue_realtimeoutboxentry",
    "quarantine_realtimeoutboxentry",
}


def support_member() -> tuple[Client, User]:
    user = UserFactory(name="support", is_staff=True)
    user.groups.add(restore_support_group())
    client = Client()
    client.force_login(user)
    return client, user


def form_fields(page: str) -> list[tuple[str, str]]:
    """The confirmation form's hidden inputs, as a browser would post them back."""
    confirm = page[page.index('<div id="confirm-action">') :]
    form = confirm[confirm.index("<form") : confirm.index("</form>")]
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)
    return [(name, html.unescape(value)) for name, value in found]


def status_counts() -> dict[str, int]:
    return {
        s: RealtimeOutboxEntry.objects.filter(status=s).count()
        for s in (Status.PENDING, Status.QUARANTINED)
    }


@pytest.mark.django_db(transaction=True)
def test_select_all_over_a_5000_row_incident_requeues_every_row_in_batches_and_audits(
    django_assert_max_num_queries: Any,
) -> None:
    bulk_quarantined(5_000, LAYER_DOWN)
    bulk_quarantined(3, "EntityNotFound: MessageReceived refers to a missing messages")
    client, user = support_member()
    filtered = f"{URL}?{urlencode({'incident': OUTAGE})}"
    page_ids = [str(r) for r in RealtimeOutboxEntry.objects.values_list("id", flat=True)[:100]]
    ask = client.post(
        filtered,
        {"action": "requeue", "select_across": "1", "index": "0", "_selected_action": page_ids},
    )
    assert ask.status_code == 200
    page = ask.content.decode()
    assert "Requeue 5000 realtime outbox entries?" in page
    fields = form_fields(page)
    assert len(fields) <= 104  # the page's checkboxes at most, never one per row
    assert ("select_across", "1") in fields
    assert 'id="permanent-warning"' not in page  # a transport outage: safe to requeue

    # Bounded batches: a handful of statements per 500 rows, not one per row.
    with django_assert_max_num_queries(80):
        done = client.post(filtered, dict_of(fields), follow=True)
    assert done.status_code == 200
    text = " ".join(str(m) for m in done.context["messages"])
    assert "Requeued 5000 of 5000 selected rows." in text
    assert status_counts() == {Status.PENDING: 5_000, Status.QUARANTINED: 3}
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.content_type.model) == (user.id, "realtimeoutboxentry")
    assert entry.change_message.startswith("Requeue: 5000 of 5000 selected rows requeued")
    assert f"incident '{OUTAGE}'" in entry.change_message


def dict_of(fields: list[tuple[str, str]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, value in fields:
        data.setdefault(name, []).append(value)
    return data


@pytest.mark.django_db(transaction=True)
def test_rows_not_eligible_are_reported_as_left_alone_and_a_manual_quarantine_names_who() -> None:
    pending = OutboxEntryFactory.create_batch(2, with_error=True)
    quarantined = OutboxEntryFactory(quarantined=True)
    client, user = support_member()
    ids = [str(r.id) for r in [*pending, quarantined]]
    done = client.post(
        URL, {"action": "quarantine", "_selected_action": ids, "post": "yes"}, follow=True
    )
    text = " ".join(str(m) for m in done.context["messages"])
    assert "Quarantined 2 of 3 selected rows. 1 not Pending" in text
    stored = RealtimeOutboxEntry.objects.get(id=pending[0].id)
    assert stored.last_error == f"ManualQuarantine: set aside by {user.username}; was: {LAYER_DOWN}"
    assert LogEntry.objects.get().change_message == "Quarantine: 2 of 3 selected rows quarantined"


@pytest.mark.django_db
def test_the_support_group_has_exactly_the_workflows_permissions_from_its_migration() -> None:
    group = Group.objects.get(name=SUPPORT)  # made by migration 0004 on the test database
    assert set(group.permissions.values_list("codename", flat=True)) == SUPPORT_PERMISSIONS


@pytest.mark.django_db
def test_the_documented_requeue_permission_alone_opens_the_outbox_and_requeues() -> None:
    row = OutboxEntryFactory(quarantined=True)
    user = UserFactory(name="req", is_staff=True, permissions=["requeue_realtimeoutboxentry"])
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 200
    client.post(URL, {"action": "requeue", "_selected_action": [str(row.id)], "post": "yes"})
    assert RealtimeOutboxEntry.objects.get(id=row.id).status == Status.PENDING
    assert client.get("/admin/messenger/user/").status_code == 403  # nothing beyond it


@pytest.mark.django_db
def test_triage_columns_show_ids_seq_attempts_error_and_times_with_seconds() -> None:
    row = OutboxEntryFactory(with_error=True)
    client, _ = support_member()
    page = client.get(URL).content.decode()
    headers = re.findall(r'<div class="text">(?:<a [^>]*>|<span>)?([^<]+)<', page)
    assert [h.lower() for h in headers] == [
        "created",
        "kind",
        "status",
        "attempts",
        "last error",
        "next attempt",
        "target kind",
        "chat or user",
        "message",
        "seq",
    ]
    assert f'title="{row.chat_id}">{str(row.chat_id)[:8]}</span>' in page
    assert f'title="{row.message_id}">{str(row.message_id)[:8]}</span>' in page
    assert LAYER_DOWN in page
    stamp = row.next_attempt_at.strftime("%Y-%m-%d %H:%M:%S")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp)
    assert stamp in page


@pytest.mark.django_db
def test_incident_facet_labels_carry_one_count_with_facets_on_or_off() -> None:
    OutboxEntryFactory.create_batch(3, quarantined=True)
    client, _ = support_member()
    for query in ({}, {"_facets": "True"}):
        page = client.get(URL, query).content.decode()
        assert f"{OUTAGE} (3)" in page, query
        assert "(3) (3)" not in page, query


@pytest.mark.django_db
def test_the_confirmation_warns_of_permanent_errors_and_cancel_keeps_the_filters() -> None:
    OutboxEntryFactory.create_batch(
        2, quarantined=True, last_error="EntityNotFound: MessageReceived refers to a missing x"
    )
    client, _ = support_member()
    incident = "EntityNotFound: MessageReceived refers to a missing x"
    filtered = f"{URL}?{urlencode({'incident': incident, 'kind': 'MessageReceived'})}"
    ids = [str(i) for i in RealtimeOutboxEntry.objects.values_list("id", flat=True)]
    page = client.post(
        filtered, {"action": "requeue", "index": "0", "_selected_action": ids}
    ).content.decode()
    warning = page[page.index('id="permanent-warning"') :]
    assert "<strong>2</strong> of these rows were" in warning and "EntityNotFound" in warning
    back = re.search(r'<a href="([^"]+)" class="button cancel-link"', page)
    assert back is not None
    assert html.unescape(back.group(1)) == filtered
    assert status_counts()[Status.QUARANTINED] == 2  # nothing changed before confirming


@pytest.mark.django_db
def test_a_superuser_creates_a_support_account_in_the_user_admin() -> None:
    admin = User.objects.create_superuser("root", password="x" * 12)
    client = Client()
    client.force_login(admin)
    assert client.get("/admin/messenger/user/").status_code == 200
    created = client.post(
        "/admin/messenger/user/add/",
        {
            "username": "carol",
            "display_name": "Carol",
            "password1": "a-long-passphrase-1",
            "password2": "a-long-passphrase-1",
            "usable_password": "true",
        },
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    carol = User.objects.get(username="carol")
    assert isinstance(carol.id, UUID) and carol.display_name == "Carol"
    assert client.get(f"/admin/messenger/user/{carol.id}/change/").status_code == 200
