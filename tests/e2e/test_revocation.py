"""Revocation reaches open connections, end to end: a user deactivated (as the admin saves
it), deleted, whose password changed or who logged out everywhere loses every open hub
connection, on every Daphne process, with a Close without allowReconnect; receives
nothing posted after; and every credential issued before is refused at negotiate and on
REST. Real Daphne processes, the real worker, real WebSocket clients."""

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger import services
from project.messenger.models import User
from tests.support.api_client import Api
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until
from tests.support.shared import env_key, shared_in_module
from tests.support.wire import hub_socket, joined, negotiate, records, until_closed
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
REVOKED = {"type": 7, "error": "Connection closed with an error. credentials revoked"}


@pytest.fixture
def second_daphne(request: pytest.FixtureRequest, hub: Hub) -> Iterator[DaphneProcess]:
    """Another hub process beside the hub's, shared as the hub is (tests/support/shared.py)."""
    yield from shared_in_module(request, lambda: DaphneProcess(hub.env), env_key(hub.env))


def deactivate(user: Any) -> None:
    user.is_active = False
    user.save()  # as the admin's change form saves it


def change_password(user: Any) -> None:
    user.set_password("a new password")
    user.save(update_fields=["password"])


def delete(user: Any) -> None:
    User.objects.get(id=user.id).delete()


def log_out_everywhere(user: Any) -> None:
    services.revocation.log_out_everywhere(user.id)


@pytest.mark.parametrize(
    "revoke",
    [deactivate, change_password, delete, log_out_everywhere],
    ids=["deactivated", "password", "deleted", "everywhere"],
)
def test_a_revoked_user_loses_every_connection_on_every_process_and_hears_nothing_more(
    hub: Hub, second_daphne: DaphneProcess, revoke: Callable[[Any], None]
) -> None:
    alice, bob, carol = (UserFactory(name=n) for n in ("alice", "bob", "carol"))
    chat = services.create_chat(alice.id, [bob.id, carol.id], title="team")
    old_token = token_for(bob.id)
    wait_until(lambda: not RealtimeOutboxEntry.objects.exclude(status=Status.DONE).exists())
    with (
        joined(hub.daphne, bob) as first,
        joined(second_daphne, bob) as second,
        joined(hub.daphne, carol) as control,
    ):
        revoke(bob)
        started = time.monotonic()
        closes = [until_closed(first, timeout=2), until_closed(second, timeout=2)]
        assert time.monotonic() - started < 2
        assert closes == [[REVOKED], [REVOKED]]  # no allowReconnect: do not come back
        after = services.post_message(alice.id, chat.id, "after the revocation")
        (event,) = records(control, timeout=10)
        assert event["arguments"][0]["messageId"] == str(after.id)
    # Every credential from before is refused, at negotiate and on REST.
    status, _, _ = negotiate(hub.daphne, old_token)
    assert status == 401
    status, answer = Api(hub.daphne.http, old_token).call("GET", "/api/chats")
    assert status == 401 and answer["error"].startswith("Unauthorized:")


def test_a_token_issued_after_logging_out_everywhere_works(hub: Hub) -> None:
    bob = UserFactory(name="bob")
    old_token = token_for(bob.id)
    services.revocation.log_out_everywhere(bob.id)
    assert Api(hub.daphne.http, old_token).call("GET", "/api/chats")[1] == {
        "error": "Unauthorized: token revoked; sign in again"
    }
    fresh = token_for(bob.id)
    assert Api(hub.daphne.http, fresh).call("GET", "/api/chats")[0] == 200
    with hub_socket(hub.daphne, fresh) as ws:
        ws.send('{"protocol":"json","version":1}\x1e')
        assert records(ws) == [{}]


def test_logging_out_everywhere_over_rest_closes_the_callers_connections(hub: Hub) -> None:
    bob = UserFactory(name="bob")
    token = token_for(bob.id)
    with joined(hub.daphne, bob) as ws:
        assert Api(hub.daphne.http, token).call("POST", "/api/logout-everywhere")[0] == 204
        assert until_closed(ws, timeout=2) == [REVOKED]
    assert Api(hub.daphne.http, token).call("GET", "/api/chats")[0] == 401
