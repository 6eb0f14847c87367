"""The demo page in a real browser (Debian's Chromium driven by Playwright), two users in
two browser contexts, against Daphne and the real worker. Screenshots of each scenario go
to test-artifacts/."""

import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from playwright.sync_api import Browser, Page, expect

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus
from project.messenger import services
from project.messenger.models import Chat, User
from tests.support.api_client import client_deliveries
from tests.support.balancer import Balancer
from tests.support.browser import off_loop, shot
from tests.support.hub_clients import Hub
from tests.support.runtime import wait_until
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def hub_env(worker_env: dict[str, str]) -> dict[str, str]:
    return dict(worker_env, DEMO_ENABLED="true")


def sign_in(
    browser: Browser,
    hub: Hub,
    name: str,
    chat: str | None = "Demo team",
    base: str | None = None,
    clock: bool = False,
) -> Page:
    """The demo page signed in as `name` with `chat` open (None: none); `clock`: the page's
    timers run on Playwright's clock (page.clock), which the test moves forward."""
    page = browser.new_context(viewport={"width": 1000, "height": 640}).new_page()
    if clock:
        page.clock.install()
    page.goto(f"{base or hub.daphne.http}/demo/")
    page.click(f"#sign-in button[value=demo-{name}]")
    page.wait_for_selector("#connection.connected")
    if chat is not None:
        open_chat(page, chat)
    return page


def open_chat(page: Page, title: str) -> None:
    page.click(f"#chats li >> text={title}")
    page.wait_for_selector("#composer:not([hidden])")


def unread_of(page: Page, title: str) -> Any:
    """The unread badge of the chat titled `title` in the chat list."""
    return page.locator("#chats li", has_text=title).locator(".unread")


def texts(page: Page) -> list[str]:
    return page.locator("#messages li .text").all_inner_texts()


def seqs(page: Page) -> list[int]:
    return [
        int(s)
        for s in page.locator("#messages li").evaluate_all(
            "items => items.map(li => li.dataset.seq)"
        )
    ]


def user(name: str) -> Any:
    return off_loop(lambda: User.objects.get(username=f"demo-{name}"))


def team() -> Chat:
    return off_loop(lambda: Chat.objects.get(title="Demo team"))


def post(sender: str, chat: Chat, body: str) -> Any:
    return off_loop(services.post_message, user(sender).id, chat.id, body)


def row_of(message_id: Any) -> RealtimeOutboxEntry:
    return off_loop(lambda: RealtimeOutboxEntry.objects.get(message_id=message_id))


@pytest.fixture
def pages(hub: Hub, browser: Browser) -> tuple[Page, Page]:
    off_loop(call_command, "seed_demo")
    return sign_in(browser, hub, "alice"), sign_in(browser, hub, "bob")


def test_a_message_sent_by_a_shows_once_at_b(pages: tuple[Page, Page]) -> None:
    alice, bob = pages
    alice.fill("#body", "hello bob")
    alice.click("#send")
    bob.wait_for_selector("#messages li >> text=hello bob")
    alice.fill("#body", "second")
    alice.click("#send")
    bob.wait_for_selector("#messages li >> text=second")
    assert texts(bob) == ["hello bob", "second"]
    read = alice.locator("#messages li.own", has_text="second").locator(".ticks")
    expect(read).to_have_attribute("aria-label", "Read by Bob")
    shot(bob, "sent-once-bob")
    shot(alice, "sent-once-alice-read-receipt")


def test_a_redelivered_row_still_shows_one_message(pages: tuple[Page, Page]) -> None:
    _alice, bob = pages
    message = post("alice", team(), "only once")
    bob.wait_for_selector("#messages li >> text=only once")
    row = row_of(message.id)

    def status() -> tuple[str, int]:
        stored = row_of(message.id)
        return stored.status, stored.attempts

    wait_until(lambda: status() == ("Done", 1), what="Done")

    def redeliver() -> None:  # force a second delivery of the very same row
        RealtimeOutboxEntry.objects.filter(id=row.id).update(
            status=RealtimeOutboxStatus.PENDING, next_attempt_at=Now()
        )  # no NOTIFY: the hub's worker finds it on its next poll (every 0.5 s)

    off_loop(redeliver)
    wait_until(lambda: status() == ("Done", 2), what="delivered a second time")
    post("alice", team(), "marker")  # queued after the duplicate
    bob.wait_for_selector("#messages li >> text=marker")
    assert texts(bob) == ["only once", "marker"]
    shot(bob, "redelivered-once")


def test_after_a_cut_b_shows_all_20_messages_in_seq_order(pages: tuple[Page, Page]) -> None:
    _alice, bob = pages
    blocked = bob.context
    blocked.route("**/hubs/messenger/negotiate**", lambda route: route.abort())
    off_loop(call_command, "realtime_disconnect", str(user("bob").id))  # the server drops bob
    bob.wait_for_selector("#connection.reconnecting")
    chat = team()
    for n in range(20):
        post("alice", chat, f"while away {n}")
    shot(bob, "cut-reconnecting")
    blocked.unroute("**/hubs/messenger/negotiate**")
    bob.wait_for_selector("#connection.connected", timeout=30_000)
    bob.wait_for_selector("#messages li >> text=while away 19")
    assert texts(bob) == [f"while away {n}" for n in range(20)]
    assert seqs(bob) == list(range(1, 21))
    shot(bob, "cut-caught-up")


def test_a_removed_participant_stops_receiving_the_chat(pages: tuple[Page, Page]) -> None:
    alice, bob = pages
    alice.fill("#body", "before removal")
    alice.click("#send")
    bob.wait_for_selector("#messages li >> text=before removal")
    chat = team()
    off_loop(services.remove_participant, user("alice").id, chat.id, user("bob").id)
    bob.wait_for_selector("#chats li >> text=Demo team", state="detached")
    alice.fill("#body", "after removal")
    alice.click("#send")
    alice.wait_for_selector("#messages li >> text=after removal")
    bob.click("#chats li >> text=Alice")
    direct = off_loop(lambda: Chat.objects.get(kind="Direct"))
    post("alice", direct, "marker")  # comes after, on bob's socket
    bob.wait_for_selector("#messages li >> text=marker")
    seen = bob.evaluate(f"window.realtime.timeline('{chat.id}').messages().map(m => m.body)")
    assert seen == ["before removal"]
    shot(bob, "removed-stops-receiving")


def test_edits_deletes_and_an_incoming_call_arrive_live(pages: tuple[Page, Page]) -> None:
    alice, bob = pages
    alice.fill("#body", "tpyo")
    alice.click("#send")
    bob.wait_for_selector("#messages li >> text=tpyo")
    alice.once("dialog", lambda dialog: dialog.accept("typo"))
    alice.click("#messages li:has-text('tpyo') button.edit")
    bob.wait_for_selector("#messages li >> text=typo")
    alice.click("#messages li:has-text('typo') button.delete")
    bob.wait_for_selector("#messages li .deleted")
    assert texts(bob) == ["Message deleted"]

    direct = off_loop(lambda: Chat.objects.get(kind="Direct"))
    off_loop(services.start_call, user("alice").id, direct.id)
    bob.wait_for_selector("#call-banner:not([hidden]) >> text=Incoming call from Alice")
    shot(bob, "incoming-call")
    bob.click("#call-decline")
    bob.wait_for_selector("#call-banner", state="hidden")


def test_enter_sends_and_each_message_shows_its_sender_time_and_side(
    pages: tuple[Page, Page],
) -> None:
    alice, bob = pages
    alice.fill("#body", "hello from the keyboard")
    alice.press("#body", "Enter")
    own = alice.locator("#messages li", has_text="hello from the keyboard")
    expect(own).to_have_class(re.compile(r"\bown\b"))
    expect(alice.locator("#body")).to_have_value("")
    expect(alice.locator("#body")).to_be_focused()
    theirs = bob.locator("#messages li", has_text="hello from the keyboard")
    expect(theirs).not_to_have_class(re.compile(r"\bown\b"))
    expect(theirs.locator(".sender")).to_have_text("Alice")
    stamp = theirs.locator("time")
    expect(stamp).to_have_text(re.compile(r"^\d{1,2}:\d{2}( [AP]M)?$"))
    expect(stamp).to_have_attribute("datetime", re.compile(r"^\d{4}-\d{2}-\d{2}T"))
    alice.fill("#body", "line one")
    alice.press("#body", "Shift+Enter")  # a new line, not a send
    alice.type("#body", "line two")
    expect(alice.locator("#body")).to_have_value("line one\nline two")
    alice.press("#body", "Enter")
    expect(bob.locator("#messages li .text").last).to_have_text("line one\nline two")
    shot(bob, "chat-bob")


def test_an_unread_badge_counts_the_other_users_messages_and_clears_when_opened(
    hub: Hub, browser: Browser
) -> None:
    off_loop(call_command, "seed_demo")
    chat = team()
    post("alice", chat, "Morning! The deploy went out at nine.")
    post("bob", chat, "Nice, no alerts so far on my side.")
    post("alice", chat, "Can you check the realtime dashboard after lunch?")
    bob = sign_in(browser, hub, "bob", chat=None)  # read nothing yet: counted from REST
    expect(unread_of(bob, "Demo team")).to_have_text("3")
    open_chat(bob, "Demo team")
    expect(unread_of(bob, "Demo team")).to_have_count(0)
    bob.fill("#body", "Sure, on it")
    bob.press("#body", "Enter")
    sent = bob.locator("#messages li.own", has_text="Sure, on it").locator(".ticks")
    expect(sent).to_have_attribute("aria-label", "Sent")
    off_loop(services.mark_read, user("alice").id, chat.id, 4)  # alice reads it elsewhere
    expect(sent).to_have_attribute("aria-label", "Read by Alice")
    direct = off_loop(lambda: Chat.objects.get(kind="Direct"))
    post("alice", direct, "psst")
    post("alice", direct, "got a minute?")
    expect(unread_of(bob, "Alice")).to_have_text("2")  # live, the chat not open
    expect(unread_of(bob, "Demo team")).to_have_count(0)
    shot(bob, "demo")  # kept in the docs as docs/demo.png
    open_chat(bob, "Alice")
    expect(unread_of(bob, "Alice")).to_have_count(0)
    bob.wait_for_selector("#messages li >> text=got a minute?")
    open_chat(bob, "Demo team")  # its timeline stays live while another chat is open
    post("alice", direct, "still there?")
    expect(unread_of(bob, "Alice")).to_have_text("1")
    carol = sign_in(browser, hub, "carol", chat=None)  # a page opened after the reads
    expect(unread_of(carol, "Demo team")).to_have_text("4")
    expect(unread_of(bob, "Demo team")).to_have_count(0)


def test_the_page_shows_who_is_online_and_when_the_others_were_last_seen(
    hub: Hub, browser: Browser
) -> None:
    """Presence on the demo page: a dot on a chat while someone in it is online, and the
    open chat's members as online or last seen, live as they come and go."""
    off_loop(call_command, "seed_demo")
    alice = sign_in(browser, hub, "alice")
    members = alice.locator("#chat-members")
    expect(members).not_to_contain_text("(online)")
    expect(alice.locator("#chats li.online", has_text="Bob")).to_have_count(0)
    bob = sign_in(browser, hub, "bob", chat=None)
    expect(members).to_contain_text("Bob (online)")
    expect(alice.locator("#chats li.online", has_text="Bob")).to_have_count(1)  # the direct chat
    shot(alice, "presence-online")
    bob.context.close()  # Bob's only page: Bob goes offline
    expect(members).to_contain_text(re.compile(r"Bob \(last seen \d"))
    expect(alice.locator("#chats li.online", has_text="Bob")).to_have_count(0)


def test_typing_shows_under_the_open_chat_of_the_other_members_and_fades(
    pages: tuple[Page, Page],
) -> None:
    alice, bob = pages
    typing = bob.locator("#typing")
    expect(typing).to_be_hidden()
    alice.type("#body", "hel")  # keystrokes: one Typing call, however many
    expect(typing).to_have_text("Alice is typing…")
    expect(alice.locator("#typing")).to_be_hidden()  # not shown to the typist
    shot(bob, "typing")
    expect(typing).to_be_hidden(timeout=10_000)  # its `until` passed: nobody types now


def test_the_demo_page_loads_with_no_failed_request_and_a_favicon(
    hub: Hub, browser: Browser
) -> None:
    off_loop(call_command, "seed_demo")
    page = browser.new_context().new_page()
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else 0)
    page.goto(f"{hub.daphne.http}/demo/")
    expect(page.locator("#sign-in button[value=demo-alice]")).to_be_visible()
    shot(page, "sign-in")
    page.click("#sign-in button[value=demo-alice]")
    page.wait_for_selector("#connection.connected")
    open_chat(page, "Demo team")
    expect(page.locator("#body")).to_be_focused()
    icon = page.request.get(f"{hub.daphne.http}/favicon.ico")
    assert icon.status == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert failed == []


@pytest.mark.parametrize(
    ("block_sse", "transport"), [(False, "ServerSentEvents"), (True, "LongPolling")]
)
def test_with_websockets_blocked_the_page_falls_back_and_stays_live(
    hub: Hub, browser: Browser, block_sse: bool, transport: str
) -> None:
    off_loop(call_command, "seed_demo")
    proxy = Balancer([hub.daphne.port])  # a network that refuses WebSocket upgrades
    proxy.block_websockets, proxy.block_sse = True, block_sse
    try:
        bob = sign_in(browser, hub, "bob", base=proxy.url)
        post("alice", team(), "over the fallback")
        bob.wait_for_selector("#messages li >> text=over the fallback")
        bob.fill("#body", "and back")
        bob.click("#send")
        bob.wait_for_selector("#messages li >> text=and back")
        refused = {r.kind for r in proxy.routed if r.backend == -1}
        assert refused == ({"websocket", "sse"} if block_sse else {"websocket"})
        line = hub.daphne.wait_for(f"hub connected.*UserId={user('bob').id}")
        assert f"transport={transport}" in line
        shot(bob, f"fallback-{transport}")
    finally:
        proxy.close()


def test_the_demo_is_off_unless_enabled_and_only_for_demo_users(
    worker_env: dict[str, str],
) -> None:
    from django.test import Client, override_settings

    off_loop(call_command, "seed_demo")
    with override_settings(DEMO_ENABLED=False):
        assert Client().get("/demo/").status_code == 404
        assert Client().get("/demo/token").status_code == 404
    with override_settings(DEMO_ENABLED=True):
        client = Client()
        assert client.post("/demo/sign-in", {"username": "admin"}).status_code == 400
        assert client.get("/demo/token").status_code == 401
        client.post("/demo/sign-in", {"username": "demo-bob"})
        token = client.get("/demo/token").json()
        assert token["userId"] == str(user("bob").id)
    with override_settings(DEMO_ENABLED=False):  # the site's icon, demo or not
        icon = Client().get("/favicon.ico")
        assert icon.status_code == 200
        assert icon["Content-Type"].startswith("image/svg+xml")


@pytest.mark.own_processes  # it kills Daphne and starts another
def test_a_page_offline_for_a_minute_with_the_hub_restarted_catches_up_with_no_rest_read(
    hub: Hub, browser: Browser
) -> None:
    """Recovery over the hub (docs/hub.md, "Recovery"): after a minute offline, with the
    only hub process restarted meanwhile (so no stateful resume can help), the page gets
    every message it missed, an edit and a delete included, through one Recover, and
    reads nothing over REST (it still marks what it shows as read: a write)."""
    off_loop(call_command, "seed_demo")
    bob = sign_in(browser, hub, "bob", clock=True)
    chat = team()
    post("alice", chat, "before")
    bob.wait_for_selector("#messages li >> text=before")
    requests: list[tuple[str, str]] = []
    bob.on("request", lambda request: requests.append((request.method, request.url)))
    bob.context.set_offline(True)
    port = hub.daphne.port
    hub.daphne.kill()  # the hub process dies: its connections and their buffers with it
    bob.clock.fast_forward("01:00")  # a minute offline: the client's retries fail
    bob.wait_for_selector("#connection.reconnecting")
    sent = [post("alice", chat, f"while away {n}") for n in range(3)]
    off_loop(services.edit_message, user("alice").id, chat.id, sent[0].id, "edited away")
    off_loop(services.delete_message, user("alice").id, chat.id, sent[1].id)
    hub.daphne = DaphneProcess(hub.env, port=port)
    bob.context.set_offline(False)
    bob.clock.fast_forward(6_000)  # past the client's next retry (at most 5 s apart)
    bob.wait_for_selector("#connection.connected", timeout=30_000)
    bob.wait_for_selector("#messages li >> text=while away 2")
    bob.wait_for_selector("#messages li >> text=edited away")
    assert texts(bob) == ["before", "edited away", "Message deleted", "while away 2"]
    reads = [url for method, url in requests if method == "GET" and "/api/" in url]
    assert reads == []
    assert any(m == "POST" and "/hubs/messenger/negotiate" in u for m, u in requests)
    hub.daphne.wait_for("recovered.*streams_recovered")
    shot(bob, "offline-minute-recovered")


def test_the_page_acknowledges_what_it_received_and_daphne_measures_it(
    hub: Hub, pages: tuple[Page, Page]
) -> None:
    """The web client module's `Acknowledge`: Daphne measures each live message from its
    commit to the page (messenger_realtime_hub_client_delivery_seconds)."""
    before, before_sum = client_deliveries(hub.daphne.http)
    for n in range(3):
        post("carol", team(), f"measured {n}")
        for page in pages:  # each page acknowledges them together, 5 s after the first
            page.wait_for_selector(f"#messages li >> text=measured {n}")
    # Both pages had all three: six deliveries, each measured without the page's wait.
    wait_until(lambda: client_deliveries(hub.daphne.http)[0] >= before + 6, what="six measured")
    count, total = client_deliveries(hub.daphne.http)
    assert count == before + 6
    assert 0 < total - before_sum < 6 * 1.0  # each under the spec's SLO here
