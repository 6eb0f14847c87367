"""Membership holds at delivery without the fast path: the owner's after-commit
membership_changed() cannot reach Redis, so only the outbox rows (and the membership
version they carry) tell the hub. Real Daphne, worker, Redis, PostgreSQL and the official
client."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until
from tests.support.shared import shared_in_module
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def daphne(request: pytest.FixtureRequest, worker_env: dict[str, str]) -> Iterator[DaphneProcess]:
    """Handed on from test to test in this module (tests/support/shared.py): the tests
    start and stop their workers, never Daphne."""
    yield from shared_in_module(request, lambda: DaphneProcess(worker_env))


@pytest.fixture
def client(daphne: DaphneProcess, worker_env: dict[str, str]) -> Iterator[Any]:
    started: list[HubClient] = []

    def connect(user: Any) -> HubClient:
        started.append(
            HubClient(
                "@microsoft/signalr",
                f"{daphne.http}/hubs/messenger",
                token_for(user.id),
                worker_env,
            )
        )
        started[-1].next("state", "connected")
        return started[-1]

    yield connect
    for one in started:
        one.kill()


def all_done() -> bool:
    return not RealtimeOutboxEntry.objects.exclude(status="Done").exists()


def without_fast_path(dead_redis_url: str) -> override_settings:
    """The owner's channel layer on a Redis that is not there: membership_changed() fails
    after commit (logged), as when the owner cannot reach Redis."""
    config = {"hosts": [{"address": dead_redis_url, "socket_connect_timeout": 1}]}
    backend = "channels_redis.core.RedisChannelLayer"
    return override_settings(CHANNEL_LAYERS={"default": {"BACKEND": backend, "CONFIG": config}})


def test_a_member_removed_without_the_fast_path_receives_nothing_pushed_after_the_removal(
    worker_env: dict[str, str], client: Any, dead_redis_url: str
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id], title="team")
    marker_chat = services.create_chat(alice.id, [bob.id], title="marker")
    first_worker = WorkerProcess(worker_env, polling_interval=0.2)
    wait_until(all_done, what="the chats' ChatUpdated rows pushed")
    first_worker.kill()
    bobs = client(bob)
    assert bobs.groups() == [f"user:{bob.id}", *sorted(f"chat:{c.id}" for c in (chat, marker_chat))]
    # The worker is stopped: these wait in the outbox until after the removal.
    before = [services.post_message(alice.id, chat.id, f"before {n}") for n in range(5)]
    with without_fast_path(dead_redis_url):
        services.remove_participant(alice.id, chat.id, bob.id)
    after = services.post_message(alice.id, chat.id, "after")
    marker = services.post_message(alice.id, marker_chat.id, "marker")
    worker = WorkerProcess(worker_env, polling_interval=0.2)
    try:
        # The marker comes last in the outbox: once it arrives, everything before it has.
        assert bobs.message()["messageId"] == str(marker.id)
        seen = "\n".join(bobs.lines)
        assert [m.id for m in [*before, after] if str(m.id) in seen] == []
        assert bobs.groups() == [f"user:{bob.id}", f"chat:{marker_chat.id}"]

        # Re-added, still without the fast path: the next message reaches bob at once,
        # without waiting for anything (no reconnect, no ChatUpdated round trip first).
        with without_fast_path(dead_redis_url):
            services.add_participant(alice.id, chat.id, bob.id)
        welcome = services.post_message(alice.id, chat.id, "welcome back")
        assert bobs.message()["messageId"] == str(welcome.id)
    finally:
        worker.kill()


def test_an_added_member_receives_the_first_message_pushed_after_the_add(
    worker_env: dict[str, str], client: Any, dead_redis_url: str
) -> None:
    alice, bob, carol = (UserFactory(name=n) for n in ("alice", "bob", "carol"))
    chat = services.create_chat(alice.id, [bob.id], title="team")
    carols = client(carol)
    worker = WorkerProcess(worker_env, polling_interval=0.2)
    try:
        for n in range(3):  # added and sent to at once, over and over: no window to miss
            with without_fast_path(dead_redis_url):
                services.add_participant(alice.id, chat.id, carol.id)
            first = services.post_message(alice.id, chat.id, f"hello carol {n}")
            assert carols.message()["messageId"] == str(first.id)
            with without_fast_path(dead_redis_url):
                services.remove_participant(alice.id, chat.id, carol.id)
    finally:
        worker.kill()
