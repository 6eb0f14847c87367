"""Per-user rate limits across processes: REST writes answered 429 with Retry-After, hub
invocations answered with an error and a flooding connection closed; counted in Redis
(two Daphne processes share one limit) and in the refusals metric."""

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from project.messenger import services
from project.messenger.models import Message
from tests.support.api_client import Api, http_get, sample
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.shared import shared_in_module
from tests.support.wire import invoke, joined, records, until_closed
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
LIMITS = {"rate_limit_writes": 5, "rate_limit_invocations": 3, "rate_limit_flood": 3}


@pytest.fixture
def two_daphnes(
    request: pytest.FixtureRequest, live_env: dict[str, str]
) -> Iterator[list[DaphneProcess]]:
    """Handed on from test to test in this module (tests/support/shared.py): the limits
    count per user (each test's own), the refusals metric is read as this test's delta."""
    yield from shared_in_module(
        request, lambda: [DaphneProcess(live_env, **LIMITS) for _ in range(2)]
    )


def refused(server: DaphneProcess, scope: str) -> float:
    text = http_get(f"{server.http}/metrics")[1]
    return sample(text, "messenger_realtime_hub_rate_limited_total", scope=scope)


def refused_since(servers: list[DaphneProcess], scope: str) -> Callable[[], list[float]]:
    """The refusals each process counts from now on: call the result to read them."""
    before = [refused(server, scope) for server in servers]
    return lambda: [refused(s, scope) - b for s, b in zip(servers, before, strict=True)]


def test_rest_writes_past_the_limit_are_429_across_processes(
    two_daphnes: list[DaphneProcess],
) -> None:
    refusals = refused_since(two_daphnes, "rest")
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    apis = [Api(server.http, token_for(alice.id)) for server in two_daphnes]
    path = f"/api/chats/{chat.id}/messages"
    statuses = [apis[n % 2].call("POST", path, {"body": f"m{n}"})[0] for n in range(5)]
    assert statuses == [201] * 5  # the limit, spread over both processes
    for api in apis:  # the sixth and seventh, on either process: over it
        status, answer = api.call("POST", path, {"body": "one too many"})
        assert status == 429
        assert answer["error"].startswith("rate limit exceeded: at most 5 per 60 s; retry in")
    assert Message.objects.filter(chat=chat).count() == 5
    # Reads are not writes; another user has a limit of their own.
    assert apis[0].call("GET", f"{path}?afterSeq=0")[0] == 200
    assert Api(two_daphnes[0].http, token_for(bob.id)).call("POST", path, {"body": "hi"})[0] == 201
    assert refusals() == [1, 1]


def test_retry_after_says_when_the_window_ends(two_daphnes: list[DaphneProcess]) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    api = Api(two_daphnes[0].http, token_for(alice.id))
    for _ in range(5):
        api.ok("POST", f"/api/chats/{chat.id}/read", {"seq": 0})
    request = urllib.request.Request(
        f"{two_daphnes[0].http}/api/chats/{chat.id}/read", data=b'{"seq": 0}', method="POST"
    )
    request.add_header("Authorization", f"Bearer {token_for(alice.id)}")
    request.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=5)
    with answer.value as response:
        assert response.code == 429
        assert 1 <= int(response.headers["Retry-After"]) <= 60


def test_hub_invocations_past_the_limit_get_errors_then_the_connection_closes(
    two_daphnes: list[DaphneProcess],
) -> None:
    refusals = refused_since(two_daphnes, "hub")
    user = UserFactory()
    with joined(two_daphnes[0], user) as first, joined(two_daphnes[1], user) as second:
        # A shared method (it reads for its caller: charged to the user's limit in Redis);
        # watching nobody reads nothing, costs one unit and answers {}.
        def watch(ws: Any, invocation_id: str) -> None:
            invoke(ws, "WatchPresence", invocation_id=invocation_id, arguments=[[]])

        for n, ws in enumerate([first, second, first]):  # 3: the limit, over both
            watch(ws, str(n))
            assert records(ws)[0]["result"] == {}
        for n in range(2):  # refused, with a reason; the connection stays
            watch(second, f"x{n}")
            (answer,) = records(second)
            assert answer["invocationId"] == f"x{n}"
            assert "HubException: rate limit exceeded: at most 3 per 60 s" in answer["error"]
        watch(second, "flood")  # the RATE_LIMIT_FLOOD-th refusal
        (close,) = until_closed(second)
        assert close["type"] == 7 and "allowReconnect" not in close
        assert close["error"].startswith("Connection closed with an error. rate limit exceeded")
        watch(first, "still")  # the other one is still open
        assert "rate limit exceeded" in records(first)[0]["error"]
    assert refusals() == [1, 3]
