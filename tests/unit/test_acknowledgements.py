"""Delivery latency from acknowledgements (hub/connection/acknowledgements.py): what is
kept for each live event, when the client is taken to have had it, and the bound; and
`Acknowledge`'s refusals (hub/connection/methods/acknowledge.py)."""

import asyncio
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest
from prometheus_client import REGISTRY

from messenger_realtime.exceptions import HubError
from messenger_realtime.hub import delivery_slo
from messenger_realtime.hub.connection.acknowledgements import (
    KEPT,
    STATEFUL_ACK_DELAY,
    Acknowledgements,
)
from messenger_realtime.hub.connection.methods.acknowledge import acknowledge
from messenger_realtime.hub.delivery_slo import (
    ACK_WINDOW,
    SHARE_WINDOW,
    SLOW_USERS,
    USER_SHARE,
    ClientShares,
)

ALICE, BOB = UUID(int=1), UUID(int=2)
UNMEASURED = "messenger_realtime_hub_client_delivery_unmeasured_total"
USERS = "messenger_realtime_hub_client_delivery_users_total"


class Clock:
    def __init__(self) -> None:
        self.at = 1000.0

    def now(self) -> float:
        return self.at


class Owner:
    def __init__(self, next_id: int | None) -> None:
        self.transport = SimpleNamespace(name="WebSockets")
        self.next_id = next_id

    def next_sequence_id(self) -> int | None:
        return self.next_id


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    seen: list[tuple[str, float]] = []

    class Histogram:
        def labels(self, kind: str, transport: str) -> Any:
            return SimpleNamespace(observe=lambda value: seen.append((kind, round(value, 6))))

    monkeypatch.setattr(delivery_slo.metrics, "client_delivery", Histogram())
    monkeypatch.setattr(delivery_slo, "_acknowledged", {})  # no child made before
    return seen


def acknowledgements_of(
    owner: Any, clock: Clock, shares: ClientShares | None = None, user: UUID = ALICE
) -> Acknowledgements:
    return Acknowledgements(owner, clock, user_id=user, shares=shares or ClientShares())


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def event(committed_at: float | None, offset: int | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {} if offset is None else {"stream": "chat:c", "offset": offset}
    message: dict[str, Any] = {"event": "message_received", "payload": payload}
    if committed_at is not None:
        message["committed_at"] = committed_at
    return message


def test_a_stateful_ack_takes_off_the_clients_ack_delay(observed: list[Any]) -> None:
    clock, owner = Clock(), Owner(next_id=7)
    acks = acknowledgements_of(owner, clock)
    acks.built(0, event(999.95))
    acks.built(1, event(None))  # a recovered event: not live, not measured
    acks.built(2, event(999.96))
    acks.emitting()  # sequence ids 7, 8, 9 at 1000.0
    clock.at = 1000.3
    owner.next_id = 10
    acks.built(0, event(1000.25))
    acks.emitting()  # id 10 at 1000.3
    clock.at = 1000.0 + 0.02 + STATEFUL_ACK_DELAY  # the client had 7 at 1000.02
    acks.acked(10)
    # 7 and 9 had at 1000.02 (sent together), 10 at 1000.32 (sent 0.3 s after 7).
    assert observed == [
        ("message_received", 0.07),
        ("message_received", 0.06),
        ("message_received", 0.07),
    ]


def test_an_event_is_never_taken_as_had_before_it_was_sent(observed: list[Any]) -> None:
    clock, owner = Clock(), Owner(next_id=1)
    acks = acknowledgements_of(owner, clock)
    acks.built(0, event(999.9))
    acks.emitting()
    clock.at = 1000.1  # a client that acks at once, not a second later
    acks.acked(1)
    assert observed == [("message_received", 0.1)]  # from its commit to its send, at least


def test_acknowledged_offsets_measure_their_streams_events_up_to_them(
    observed: list[Any],
) -> None:
    clock, owner = Clock(), Owner(next_id=None)
    acks = acknowledgements_of(owner, clock)
    for offset in (1, 2, 3):
        acks.built(offset - 1, event(999.5 + offset / 10, offset))
    acks.built(3, event(999.9))  # no stream: nothing to acknowledge it by
    acks.emitting()
    clock.at = 1000.2
    acks.acknowledged({"chat:c": 2, "chat:other": 9}, 0.15)  # had at 1000.05
    assert observed == [("message_received", 0.45), ("message_received", 0.35)]
    acks.acknowledged({"chat:c": 3}, 0.0)
    assert observed[-1] == ("message_received", 0.4)


def test_an_acknowledgements_later_events_count_from_when_they_were_sent(
    observed: list[Any],
) -> None:
    clock, owner = Clock(), Owner(next_id=None)
    acks = acknowledgements_of(owner, clock)
    acks.built(0, event(999.9, 1))
    acks.emitting()  # sent at 1000.0
    clock.at = 1000.4
    acks.built(0, event(1000.35, 2))
    acks.emitting()  # sent at 1000.4
    clock.at = 1001.0
    acks.acknowledged({"chat:c": 2}, 0.9)  # the first had at 1000.1, the second 0.4 s later
    assert observed == [("message_received", 0.2), ("message_received", 0.15)]


def test_a_client_that_never_acknowledges_holds_at_most_kept_events(observed: list[Any]) -> None:
    acks = acknowledgements_of(Owner(next_id=None), Clock())
    share = counted(UNMEASURED, reason="share")
    for offset in range(KEPT * 3):
        acks.built(0, event(999.0, offset))
        acks.emitting()
    acks.acknowledged({"chat:c": KEPT * 3}, 0.0)
    # The newest KEPT (the older ones went unobserved): the user's share of them measured,
    # the rest counted past it.
    assert len(observed) == USER_SHARE
    assert counted(UNMEASURED, reason="share") - share == KEPT - USER_SHARE


def test_an_acknowledgement_past_the_window_of_its_send_is_not_measured(
    observed: list[Any],
) -> None:
    """A client that had an event at once but acknowledges it 20 s later (saying it
    waited nothing) would add 20 s to the histogram: past ACK_WINDOW it adds nothing."""
    clock, owner = Clock(), Owner(next_id=1)
    acks = acknowledgements_of(owner, clock)
    late = counted(UNMEASURED, reason="late")
    acks.built(0, event(999.99))
    acks.emitting()  # sent at 1000.0
    clock.at = 1000.0 + ACK_WINDOW + 0.5
    acks.built(0, event(clock.at - 0.01))
    owner.next_id = 2
    acks.emitting()  # id 2, sent just now
    clock.at += STATEFUL_ACK_DELAY
    acks.acked(2)
    # The second only: at most until the acknowledgement (the first's stated time plus
    # its 10.5 s lead would be later), so by the acknowledgement, 1.01 s after its commit.
    assert observed == [("message_received", 1.01)]
    assert counted(UNMEASURED, reason="late") - late == 1


def test_a_stated_wait_is_taken_off_only_up_to_the_window(observed: list[Any]) -> None:
    clock, owner = Clock(), Owner(next_id=None)
    acks = acknowledgements_of(owner, clock)
    acks.built(0, event(999.9, 1))
    acks.emitting()  # sent at 1000.0
    clock.at = 1008.0
    acks.built(0, event(1007.9, 2))
    acks.emitting()  # sent at 1008.0
    clock.at = 1009.0
    # "Had the first 60 s ago": taken as ACK_WINDOW (had at 999.0, so at its send), the
    # second as sent 8 s after it: at 1008.0 (not before its send).
    acks.acknowledged({"chat:c": 2}, 60.0)
    assert observed == [("message_received", 0.1), ("message_received", 0.1)]


def test_one_user_adds_at_most_its_share_and_one_slow_user_window(
    observed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What one abusive client can do to the client signal: its user's observations are
    capped per process and SHARE_WINDOW, and it counts once as a slow user-window, so
    the alert that needs SLOW_USERS of them in five minutes cannot come from it."""
    now = [0.0]
    monkeypatch.setattr(delivery_slo.time, "monotonic", lambda: now[0])
    shares = ClientShares()
    measured, slow = counted(USERS, outcome="measured"), counted(USERS, outcome="slow")
    for _ in range(USER_SHARE * 3):
        shares.observe(ALICE, "message_received", "WebSockets", 9.0)
    shares.observe(BOB, "message_received", "WebSockets", 0.05)
    assert len(observed) == USER_SHARE + 1
    assert counted(USERS, outcome="measured") - measured == 2
    assert counted(USERS, outcome="slow") - slow == 1
    now[0] = SHARE_WINDOW  # the next window: alice's share again, one more user-window
    assert shares.observe(ALICE, "message_received", "WebSockets", 9.0) is True
    assert counted(USERS, outcome="slow") - slow == 2
    # In five minutes one user makes at most six slow user-windows: under the alert's floor.
    assert 300 / SHARE_WINDOW + 1 < SLOW_USERS


@pytest.mark.parametrize(
    ("offsets", "waited", "reason"),
    [
        (["chat:c", 1], 0, "takes an object of stream -> offset"),
        ({"chat:c": "1"}, 0, "takes an object of stream -> offset"),
        ({"chat:c": -1}, 0, "takes an object of stream -> offset"),
        ({"chat:c": True}, 0, "takes an object of stream -> offset"),
        ({f"chat:{n}": 1 for n in range(257)}, 0, "at most 256 streams"),
        ({"chat:c": 1}, -1, "ms since the client had the first event"),
        ({"chat:c": 1}, 60_001, "ms since the client had the first event"),
        ({"chat:c": 1}, 0.5, "ms since the client had the first event"),
    ],
)
def test_acknowledge_refuses_what_is_not_offsets_and_a_wait(
    offsets: Any, waited: Any, reason: str
) -> None:
    connection = SimpleNamespace(acknowledging=lambda: pytest.fail("nothing acknowledged"))
    with pytest.raises(HubError, match=reason):
        asyncio.run(acknowledge(connection, offsets, waited))
