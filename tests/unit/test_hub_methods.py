"""The hub methods' registry (hub/connection/methods/): one module per method, found by
discovery, its arity read from its signature; a HubError's message reaches the client."""

import asyncio
import gc
import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from messenger_realtime.exceptions import HubError
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection import invocations, methods
from messenger_realtime.hub.connection.budget import Budget, Budgets
from messenger_realtime.hub.protocols.json_protocol import JsonProtocol
from messenger_realtime.hub.recovery import RecoverError


def test_every_module_of_the_methods_package_declares_its_method_by_name() -> None:
    found = methods.discover()
    assert {name: m.arity for name, m in found.items()} == {
        "Acknowledge": 2,
        "GetGroups": 0,
        "Recover": 1,
        "RenewToken": 1,
        "Typing": 1,
        "WatchPresence": 1,
    }
    assert invocations.HUB_METHODS.keys() == found.keys()


def test_every_method_declares_its_cost_and_those_that_read_are_shared() -> None:
    costs = {name: m.cost for name, m in methods.discover().items()}
    assert all(cost.call >= 1 for cost in costs.values())
    shared = {name for name, cost in costs.items() if cost.shared}
    assert shared == {"Recover", "RenewToken", "WatchPresence"}
    # Those whose work grows with what a call names pay by it.
    assert costs["WatchPresence"].units([[f"u{n}" for n in range(200)]]) == 21
    assert costs["Acknowledge"].units([{f"s{n}": 1 for n in range(256)}, 0]) == 5
    assert costs["Recover"].units([{f"s{n}": 1 for n in range(1000)}]) == 43
    assert costs["RenewToken"].units(["token"]) == 5
    assert costs["Typing"].units(["x"]) == 1
    # Whatever a client sends as arguments, counting them never fails.
    for junk in ([], [None], ["text"], [7], [{"a": 1}, "x"]):
        assert all(cost.units(junk) >= 1 for cost in costs.values())


def test_a_method_cannot_be_declared_without_a_cost() -> None:
    with pytest.raises(TypeError, match="declares no Cost"):
        methods.hub_method("Free", cost=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one unit"):
        methods.Cost(call=0)


@pytest.mark.parametrize(
    "steps, refused",
    [
        # (seconds since the last step, units asked) with a budget of 2/s, burst 4
        ([(0, 4), (0, 1)], [False, True]),  # the burst, then nothing left
        ([(0, 4), (0.5, 1), (0, 1)], [False, False, True]),  # half a second refills one
        ([(0, 3), (10, 4)], [False, False]),  # refilled to the burst, never past it
        ([(10, 5)], [True]),  # more than the burst at once: never
    ],
)
def test_a_connection_s_budget_refills_at_its_rate_up_to_its_burst(
    steps: list[tuple[float, int]], refused: list[bool]
) -> None:
    now = 100.0
    budget = Budget(2.0, 4, now, "one connection")
    got = []
    for elapsed, units in steps:
        now += elapsed
        got.append(budget.spend(units, now) is not None)
    assert got == refused


def test_a_user_s_connections_share_what_they_may_spend_in_a_process() -> None:
    """One user's 32 connections flooding at once spent 32 bursts; a message pays its
    connection's budget and its user's share of the process, both or neither."""
    options = SimpleNamespace(invocation_budget=10.0, invocation_burst=10)
    budgets = Budgets()
    user, other = uuid.uuid4(), uuid.uuid4()
    share = budgets.for_user(user, options, 0.0)  # type: ignore[arg-type]
    assert budgets.for_user(user, options, 0.0) is share  # type: ignore[arg-type]
    connections = [Budget.of_connection(options, 0.0) for _ in range(3)]  # type: ignore[arg-type]
    spent = [c.spend(10, 0.0, share) for c in connections]
    assert [s is None for s in spent] == [True, True, False]  # the share: two bursts
    refusal = spent[2]
    assert refusal is not None and "one user's connections to this server" in str(refusal)
    assert connections[2].spend(10, 0.0) is None  # refused by the share: its own untouched
    other_share = budgets.for_user(other, options, 0.0)  # type: ignore[arg-type]
    assert Budget.of_connection(options, 0.0).spend(10, 0.0, other_share) is None  # type: ignore[arg-type]
    del share, spent, refusal
    gc.collect()
    # Once no connection holds it the share goes; the next connection's is whole again
    # (the old one, spent at 0.0, would refuse this).
    anew = budgets.for_user(user, options, 0.0)  # type: ignore[arg-type]
    assert anew.spend(20, 0.0) is None


def test_bytes_read_are_paid_by_waiting_for_the_slowest_budget_at_most_a_burst() -> None:
    connection = Budget(10.0, 10, 0.0, "one connection")
    share = Budget(20.0, 20, 0.0, "one user's connections to this server")
    assert connection.delay(4, 0.0, share) == 0  # within both: read at once
    assert connection.delay(8, 0.0, share) == pytest.approx(0.2)  # 6 - 8: 2 units at 10/s
    assert connection.delay(100, 0.0, share) == pytest.approx(1.0)  # owed: a burst at most
    assert connection.spend(1, 0.5) is not None  # the next calls wait for it, too


def test_work_owed_after_a_call_empties_the_budget_but_leaves_no_debt() -> None:
    budget = Budget(1.0, 10, 0.0, "one connection")
    budget.owe(14, 0.0)  # a Recover that sent more than its burst
    assert budget.spend(1, 0.5) is not None  # nothing left: the next call waits
    assert budget.spend(1, 1.0) is None  # a second's refill, not four


def test_a_method_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        methods.hub_method("Recover", cost=methods.Cost())(lambda connection: asyncio.sleep(0))


def test_recover_errors_are_hub_errors() -> None:
    assert issubclass(RecoverError, HubError)


class Sent:
    def __init__(self) -> None:
        self.frames: list[Any] = []

    async def emit(self, frame: Any) -> None:
        self.frames.append(frame)


OPTIONS = SimpleNamespace(invocation_budget=10.0, invocation_burst=10, rate_limit_flood=3)


def user_share() -> Budget:
    """A user's share of the process larger than any test here spends."""
    return Budget(1000.0, 1000, 0.0, "one user's connections to this server")


def fake_connection(outbound: Sent) -> Any:
    loop = SimpleNamespace(time=lambda: 0.0)  # a clock that stands still: no refill
    ended: list[Any] = []

    async def end(how: Any) -> None:
        ended.append(how)

    return SimpleNamespace(
        options=OPTIONS,
        user_id=None,
        protocol=JsonProtocol,
        outbound=outbound,
        loop=loop,
        end=end,
        ended=ended,
    )


def invoke(monkeypatch: pytest.MonkeyPatch, call: Any, arguments: list[Any]) -> dict[str, Any]:
    async def no_limit(*args: Any) -> None:
        return None

    monkeypatch.setattr(ratelimit, "acheck", no_limit)
    try_method = methods.HubMethod("Try", 1, call, methods.Cost())
    monkeypatch.setitem(invocations.HUB_METHODS, "Try", try_method)
    outbound = Sent()
    connection = fake_connection(outbound)
    message = {"type": 1, "invocationId": "1", "target": "Try", "arguments": arguments}
    asyncio.run(invocations.Invocations(OPTIONS, 0.0, user_share()).handle(connection, message))  # type: ignore[arg-type]
    (frame,) = outbound.frames
    return json.loads(frame.rstrip("\x1e"))  # type: ignore[no-any-return]


def test_a_hub_error_is_answered_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(connection: Any, argument: Any) -> None:
        raise HubError(f"no {argument}")

    completion = invoke(monkeypatch, refuse, ["way"])
    assert completion["error"] == (
        "Failed to invoke 'Try' due to an error on the server. HubException: no way"
    )


def test_any_other_error_is_answered_without_why(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fail(connection: Any, argument: Any) -> None:
        raise RuntimeError("a secret")

    completion = invoke(monkeypatch, fail, ["x"])
    assert completion["error"] == "An unexpected error occurred invoking 'Try' on the server."


def test_a_result_is_the_completions(monkeypatch: pytest.MonkeyPatch) -> None:
    async def echo(connection: Any, argument: Any) -> Any:
        return argument

    assert invoke(monkeypatch, echo, [{"a": 1}])["result"] == {"a": 1}


def test_a_local_method_runs_without_a_rate_limit_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def limited(*args: Any) -> None:
        raise AssertionError("charged to the Redis rate limit")

    async def local(connection: Any) -> str:
        return "ran"

    monkeypatch.setattr(ratelimit, "acheck", limited)
    method = methods.HubMethod("Local", 0, local, methods.Cost(call=1))
    monkeypatch.setitem(invocations.HUB_METHODS, "Local", method)
    outbound = Sent()
    message = {"type": 1, "invocationId": "1", "target": "Local", "arguments": []}
    handled = invocations.Invocations(OPTIONS, 0.0, user_share()).handle(
        fake_connection(outbound), message
    )
    asyncio.run(handled)
    (frame,) = outbound.frames
    assert json.loads(frame.rstrip("\x1e"))["result"] == "ran"


def test_past_its_budget_a_call_is_refused_and_a_flood_ends_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def local(connection: Any) -> str:
        return "ran"

    method = methods.HubMethod("Local", 0, local, methods.Cost(call=4))
    monkeypatch.setitem(invocations.HUB_METHODS, "Local", method)
    outbound = Sent()
    connection = fake_connection(outbound)
    calls = invocations.Invocations(OPTIONS, 0.0, user_share())

    async def run() -> list[bool]:
        going = []
        for n in range(6):  # 4 + 4 fit the burst of 10; then refused, refused, flood
            message = {"type": 1, "invocationId": str(n), "target": "Local", "arguments": []}
            going.append(await calls.handle(connection, message))
        return going

    assert asyncio.run(run()) == [True, True, True, True, False, False]
    answers = [json.loads(f.rstrip("\x1e")) for f in outbound.frames]
    assert [a.get("result") for a in answers[:2]] == ["ran", "ran"]
    assert all("invocation budget exceeded" in a["error"] for a in answers[2:])
    assert len(answers) == 4  # the third refusal is the flood: a Close, no answer
    (ending,) = connection.ended[:1]
    assert "invocation budget exceeded" in ending.error


def test_a_ping_is_charged_like_any_message() -> None:
    outbound = Sent()
    connection = fake_connection(outbound)
    calls = invocations.Invocations(OPTIONS, 0.0, user_share())

    async def run() -> list[bool]:
        return [await calls.handle(connection, {"type": 6}) for _ in range(14)]

    going = asyncio.run(run())
    assert going == [True] * 12 + [False, False]  # 10 paid, 2 refused, the 3rd a flood
    assert outbound.frames == []


def test_a_refusal_of_the_user_s_rate_limit_is_kept_until_its_retry_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client flooding a shared method made one Redis round trip per refused call; a
    refusal now holds on its connection until its retry time, with no round trip."""
    asked: list[int] = []

    async def refusing(scope: str, user: Any, options: Any, units: int = 1) -> Any:
        asked.append(units)
        return ratelimit.Refusal(limit=600, window=60.0, retry_after=3)

    async def shared(connection: Any) -> str:
        return "ran"

    monkeypatch.setattr(ratelimit, "acheck", refusing)
    method = methods.HubMethod("Shared", 0, shared, methods.Cost(call=1, shared=True))
    monkeypatch.setitem(invocations.HUB_METHODS, "Shared", method)
    outbound = Sent()
    clock = [0.0]
    connection = fake_connection(outbound)
    connection.loop = SimpleNamespace(time=lambda: clock[0])
    calls = invocations.Invocations(OPTIONS, 0.0, user_share())

    async def run() -> None:
        for at in (0.0, 1.0, 2.9, 3.0):
            clock[0] = at
            message = {"type": 1, "invocationId": str(at), "target": "Shared", "arguments": []}
            await calls.handle(connection, message)

    asyncio.run(run())
    assert asked == [1, 1]  # at 0 and once the refusal's 3 s were over
    answers = [json.loads(f.rstrip("\x1e")) for f in outbound.frames]
    assert all("rate limit exceeded" in a["error"] for a in answers)
