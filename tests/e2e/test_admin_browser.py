"""Support's whole workflow in Chromium, against Daphne, signed in through the login form
as a staff user whose only permissions are the "Realtime support" group's: triage an
outage's 5,000 quarantined rows, select all, cancel (filters kept), requeue them all, see
the warning on a permanent incident, quarantine a row by hand. Screenshots go to
test-artifacts/."""

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.admin.models import LogEntry
from playwright.sync_api import Browser, Page

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger.models import User
from tests.support.browser import off_loop, shot
from tests.support.factories import LAYER_DOWN, OutboxEntryFactory
from tests.support.support_admin import bulk_quarantined, restore_support_group
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
OUTAGE = "redis.exceptions.ConnectionError (code #)"
PERMANENT = "EntityNotFound: MessageReceived refers to a missing messages"
PASSWORD = "support-passphrase-42"
ROWS = 5_000


def set_up() -> dict[str, Any]:
    bulk_quarantined(ROWS, LAYER_DOWN)
    bulk_quarantined(2, PERMANENT)
    pending = OutboxEntryFactory()
    user = User.objects.create_user("support-anna", password=PASSWORD, is_staff=True)
    user.groups.add(restore_support_group())
    return {"pending": pending.id, "user": user.username}


@pytest.fixture
def daphne(worker_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(worker_env)  # no worker: requeued rows stay Pending to count
    yield server
    server.kill()


def sign_in(browser: Browser, base: str, username: str) -> Page:
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{base}/admin/login/?next=/admin/messenger_realtime/realtimeoutboxentry/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    return page


def select_all_and(page: Page, action: str) -> None:
    """Tick the page, take Django's "Select all N" across pages (if more), run `action`."""
    page.check("#action-toggle")
    if page.locator(".actions .question a").count():
        page.click(".actions .question a")
        page.wait_for_selector(".actions .all:not(.hidden)")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.wait_for_selector("#confirm-action")


def counts() -> dict[str, int]:
    rows = RealtimeOutboxEntry.objects
    return {s: rows.filter(status=s).count() for s in (Status.PENDING, Status.QUARANTINED)}


def test_support_requeues_a_5000_row_incident_from_the_browser_with_only_the_group(
    daphne: DaphneProcess,
    browser: Browser,
) -> None:
    made = off_loop(set_up)
    page = sign_in(browser, daphne.http, made["user"])

    # Triage: every column, the error included, is on screen at 1280 px beside the filters.
    filters = page.locator("#changelist-filter").bounding_box()
    assert filters is not None
    for column in ("last_error", "next_attempt", "chat_or_user", "message", "seq"):
        box = page.locator(f"#result_list td.field-{column}").first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= filters["x"], (column, box)
    page.click(f"#changelist-filter a:has-text('{OUTAGE} ({ROWS})')")
    page.wait_for_selector(f".paginator:has-text('{ROWS} realtime outbox entries')")
    shot(page, "admin-incident")
    filtered = page.url

    select_all_and(page, "requeue")
    assert f"Requeue {ROWS} realtime outbox entries?" in page.inner_text("#content")
    assert page.locator("#permanent-warning").count() == 0
    page.click("#cancel")
    page.wait_for_selector("#result_list")
    assert parse_qs(urlparse(page.url).query)["incident"] == [OUTAGE]  # filters kept
    assert off_loop(counts) == {Status.PENDING: 1, Status.QUARANTINED: ROWS + 2}

    select_all_and(page, "requeue")
    shot(page, "admin-confirm-requeue")
    page.click("#confirm")
    page.wait_for_selector(".messagelist")
    assert f"Requeued {ROWS} of {ROWS} selected rows." in page.inner_text(".messagelist")
    assert urlparse(page.url).query == urlparse(filtered).query
    shot(page, "admin-requeued")
    assert off_loop(counts) == {Status.PENDING: ROWS + 1, Status.QUARANTINED: 2}
    audit = off_loop(lambda: list(LogEntry.objects.values_list("user__username", "change_message")))
    assert audit == [
        (made["user"], f"Requeue: {ROWS} of {ROWS} selected rows requeued; incident '{OUTAGE}'")
    ]

    # A permanent incident: the confirmation says requeueing would only quarantine again.
    page.goto(f"{daphne.http}/admin/messenger_realtime/realtimeoutboxentry/")
    page.click(f"#changelist-filter a:has-text('{PERMANENT} (2)')")
    select_all_and(page, "requeue")
    assert "2 of these rows were" in page.inner_text("#permanent-warning")
    shot(page, "admin-permanent-warning")
    page.click("#cancel")

    # A hand quarantine names the operator.
    page.goto(f"{daphne.http}/admin/messenger_realtime/realtimeoutboxentry/?q={made['pending']}")
    page.check("input.action-select")
    page.select_option("select[name=action]", "quarantine")
    page.click("button[name=index]")
    page.click("#confirm")
    page.wait_for_selector(".messagelist")
    row = off_loop(lambda: RealtimeOutboxEntry.objects.get(id=made["pending"]))
    assert (row.status, row.last_error) == (
        Status.QUARANTINED,
        f"ManualQuarantine: set aside by {made['user']}",
    )
