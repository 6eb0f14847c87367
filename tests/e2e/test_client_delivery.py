"""Delivery latency measured where the user sees it (issue 49): Daphne observes each live
event from its row's commit to the client's acknowledgement, for clients that
acknowledge (stateful reconnect's Acks here; the web client module's `Acknowledge` in
test_browser.py), with real Daphne, the real worker and the official client."""

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from project.messenger import services
from tests.support.api_client import client_deliveries, http_get
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub
from tests.support.runtime import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
FAMILY = "messenger_realtime_hub_client_delivery_seconds"


def scrape(hub: Hub) -> dict[str, float]:
    """Daphne's samples by name and labels ("name{k=v,...}")."""
    status, text = http_get(f"{hub.daphne.http}/metrics", timeout=5)
    assert status == 200
    return {
        sample.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())) + "}": (
            sample.value
        )
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def measured(hub: Hub) -> tuple[float, float]:
    return client_deliveries(hub.daphne.http)


def deliveries(client: Any, chat: Any) -> int:
    return sum(
        1
        for e in client.outputs("event")
        if e["event"] == "message_received" and e["payload"]["chatId"] == str(chat.id)
    )


@pytest.mark.parametrize("messagepack", [False, True])
def test_a_stateful_clients_acks_measure_each_live_event_from_its_commit(
    hub: Hub, clients: Any, messagepack: bool
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = clients(bob, options={"stateful": True, "messagepack": messagepack})
    before, before_sum = measured(hub)
    started = time.monotonic()
    for n in range(5):
        services.post_message(alice.id, chat.id, f"m{n}")
    wait_until(lambda: deliveries(client, chat) == 5, what="the 5 events at the client")
    # The client acks at most once a second; each ack is observed when it arrives.
    wait_until(lambda: measured(hub)[0] >= before + 5, what="5 deliveries measured")
    elapsed = time.monotonic() - started
    count, total = measured(hub)
    assert count == before + 5  # each live event once, acked once
    # Each from its commit to when the client had it: the Ack came a second after the
    # client had the first of a window (its timer), which the hub takes off, so each is
    # the real path's time on loopback (tens of ms), not the Ack's second; and none is
    # longer than the whole exchange. The clocks' offset is measured and corrected.
    assert 0 < total - before_sum < 5 * min(elapsed, 0.5)
    samples = scrape(hub)
    assert samples["messenger_realtime_hub_database_clock_uncertainty_seconds{}"] < 0.05
    assert abs(samples["messenger_realtime_hub_database_clock_offset_seconds{}"]) < 0.05


def test_a_client_that_does_not_acknowledge_is_not_measured(hub: Hub, clients: Any) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = clients(bob)  # no stateful reconnect, no Acknowledge
    before = measured(hub)[0]
    services.post_message(alice.id, chat.id, "not measured")
    wait_until(lambda: deliveries(client, chat) == 1, what="the event at the client")
    watcher = clients(alice, options={"stateful": True})  # one that acks, after it
    services.post_message(bob.id, chat.id, "measured")
    wait_until(lambda: deliveries(watcher, chat) == 1, what="the event at the acking client")
    wait_until(lambda: measured(hub)[0] >= before + 1, what="the acking client measured")
    assert measured(hub)[0] == before + 1  # the acking client's event alone
