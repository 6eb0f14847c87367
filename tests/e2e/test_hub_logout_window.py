"""A logout that falls between a session connection's authentication (the WebSocket
upgrade) and its SignalR handshake (where it joins the user group, and so first hears
the logout's control message) still closes it: the handshake re-reads the session after
joining. Real Daphne, real WebSocket client, the real logout (Django's user_logged_out)."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.signals import user_logged_out
from django.test import Client
from websockets.sync.client import connect

from messenger_realtime.hub.connection.authentication import SESSION_ENDED
from tests.support.factories import UserFactory
from tests.support.wire import RS, negotiate, push_to_user, until_closed
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


def test_a_logout_between_connect_and_handshake_closes_the_connection_for_good(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    status, body, _ = negotiate(daphne, headers=cookie)
    assert status == 200
    url = f"{daphne.ws}/hubs/messenger?id={body['connectionToken']}"
    with connect(url, additional_headers=cookie, origin=daphne.http) as ws:
        # Upgraded: the session authenticated this connection, which has not joined its
        # user group yet. The logout's control message goes out now, unheard.
        browser.logout()
        ws.send('{"protocol":"json","version":1}' + RS)
        push_to_user(user.id, 1)  # an event after the logout: it must not reach the socket
        seen = until_closed(ws)
    # The handshake is answered, then a Close that says why and asks for no reconnect
    # (the session is gone: a reconnect could only be refused).
    assert seen == [{}, {"type": 7, "error": f"Connection closed with an error. {SESSION_ENDED}"}]
    daphne.wait_for(f"hub connection closed.*UserId={user.id}.*reason=session ended")


def test_a_handshake_after_the_logouts_message_but_before_its_flush_is_closed(
    daphne: DaphneProcess,
) -> None:
    """The narrowest window: Django sends user_logged_out (our receiver sends the control
    message) and only then flushes the session. A receiver connected after ours runs in
    between: a handshake there joins too late for the message and reads the session
    before Django's flush would have removed it."""
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    seen: list[Any] = []

    with connect(f"{daphne.ws}/hubs/messenger", additional_headers=cookie) as ws:

        def handshake_in_the_window(**kwargs: Any) -> None:
            ws.send('{"protocol":"json","version":1}' + RS)
            seen.extend(until_closed(ws))

        user_logged_out.connect(handshake_in_the_window)
        try:
            browser.logout()
        finally:
            user_logged_out.disconnect(handshake_in_the_window)
    assert seen == [{}, {"type": 7, "error": f"Connection closed with an error. {SESSION_ENDED}"}]


def test_a_session_connection_whose_session_holds_is_served(daphne: DaphneProcess) -> None:
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    with connect(f"{daphne.ws}/hubs/messenger", additional_headers=cookie) as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        daphne.wait_for(f"hub connected.* UserId={user.id}")
        push_to_user(user.id, 1)
        browser.logout()  # and a logout after the handshake closes it through its group
        seen = until_closed(ws)
    assert seen[0] == {} and seen[1]["target"] == "contact_removed"
    assert seen[2:] == [{"type": 7, "error": f"Connection closed with an error. {SESSION_ENDED}"}]
