"""A row that kills the worker harms only itself (real worker processes, Daphne, the
official SignalR client)."""

import asyncio
import signal
from typing import Any

import pytest

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.dispatch.sql import EXHAUSTED_ERROR
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger import services
from tests.support.factories import ChatFactory, OutboxEntryFactory, UserFactory, backlog
from tests.support.helpers import layer, subscribe
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.ports import POISON_ENV
from tests.support.runtime import run
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow
MAX_ATTEMPTS = 4


def test_a_row_that_crashes_the_worker_is_quarantined_alone_and_the_rest_is_delivered(
    worker_env: dict[str, str],
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    busy = services.create_chat(alice.id, [bob.id], title="busy")
    other = services.create_chat(alice.id, [bob.id], title="other")
    messages = backlog(busy, 40)
    poison = messages[20]
    daphne = DaphneProcess(worker_env)
    client = HubClient(
        "@microsoft/signalr", f"{daphne.http}/hubs/messenger", token_for(bob.id), worker_env
    )
    env = dict(worker_env, **{POISON_ENV: str(poison.id)})
    settings = {
        "domain_port": "tests.support.ports.KillingPort",
        "max_attempts": MAX_ATTEMPTS,
        "backoff_base": 0.05,
        "backoff_cap": 0.2,
        "polling_interval": 0.2,
    }
    crashes, sent_elsewhere = 0, []
    try:
        client.next("state", "connected")

        def settled() -> bool:  # the poison quarantined, everything else delivered
            return not RealtimeOutboxEntry.objects.filter(status=Status.PENDING).exists()

        # A supervisor, as systemd or Kubernetes would be: restart the worker whenever it
        # dies; meanwhile another chat keeps getting messages.
        while not settled():
            assert crashes <= MAX_ATTEMPTS, "more crashes than the poison's attempts"
            sent_elsewhere.append(services.post_message(alice.id, other.id, "meanwhile").seq)
            worker = WorkerProcess(env, **settings)
            try:
                exit_code = worker.wait_until_exit_or(settled, timeout=60)
            finally:
                worker.kill()
            if exit_code == -signal.SIGKILL:
                crashes += 1
        got = received(client, expected=len(messages) - 1 + len(sent_elsewhere))
    finally:
        client.kill()
        daphne.kill()
    row = RealtimeOutboxEntry.objects.get(message_id=poison.id)
    assert (row.status, row.attempts, row.last_error) == (
        Status.QUARANTINED,
        MAX_ATTEMPTS,
        EXHAUSTED_ERROR,
    )
    assert crashes == MAX_ATTEMPTS  # each crash was the poison's own attempt
    innocents = RealtimeOutboxEntry.objects.filter(message_id__in=[m.id for m in messages])
    assert innocents.exclude(id=row.id).filter(status=Status.DONE).count() == 39
    assert got[str(busy.id)] == {m.seq for m in messages} - {poison.seq}
    assert got[str(other.id)] >= set(sent_elsewhere)


def received(client: HubClient, expected: int) -> dict[str, set[int]]:
    """Distinct (chat, seq) the client received, per chat, once `expected` arrived."""
    seen: dict[str, set[int]] = {}
    while sum(len(s) for s in seen.values()) < expected:
        payload: Any = client.message()
        seen.setdefault(payload["chatId"], set()).add(payload["seq"])
    return seen


def test_two_workers_drain_a_burst_fairly_in_order_and_without_a_double_claim(
    worker_env: dict[str, str], redis_url: str
) -> None:
    hot = ChatFactory()
    backlog(hot, 5000)
    others = [OutboxEntryFactory() for _ in range(20)]
    channel_layer = layer(redis_url)
    channel = run(subscribe(channel_layer, hot.id))
    for entry in others:
        run(channel_layer.group_add(layer_group(HubTarget.chat(entry.chat_id)), channel))
    workers = [WorkerProcess(worker_env, polling_interval=0.2) for _ in range(2)]
    try:
        arrived = run(drain(layer(redis_url), channel, count=5020, timeout=120))
    finally:
        for worker in workers:
            worker.kill()
    order = [(message["chat"], message["payload"]["seq"]) for message in arrived]
    assert len(set(order)) == len(order) == 5020  # nobody pushed a row twice
    hot_seqs = [seq for chat, seq in order if chat == str(hot.id)]
    assert hot_seqs == list(range(1, 5001))  # the burst in its order
    others_at = [i for i, (chat, _) in enumerate(order) if chat != str(hot.id)]
    assert max(others_at) < 400  # within the first two batches, not behind 5,000 rows
    assert set(RealtimeOutboxEntry.objects.values_list("attempts", flat=True)) == {1}


async def drain(channel_layer: Any, channel: str, count: int, timeout: float) -> list[Any]:
    """Every message of `channel`, in arrival order, until `count` arrived."""
    arrived: list[Any] = []
    async with asyncio.timeout(timeout):
        while len(arrived) < count:
            arrived.append(await channel_layer.receive(channel))
    return arrived
