"""The hub methods' registry (hub/connection/methods/): one module per method, found by
discovery, its arity read from its signature; a HubError's message reaches the client."""

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from messenger_realtime.exceptions import HubError
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection import invocations, methods
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


def test_only_typing_and_acknowledge_are_spared_the_invocation_rate_limit() -> None:
    spared = {name for name, m in methods.discover().items() if not m.charged}
    assert spared == {"Acknowledge", "Typing"}


def test_a_method_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        methods.hub_method("Recover")(lambda connection: asyncio.sleep(0))


def test_recover_errors_are_hub_errors() -> None:
    assert issubclass(RecoverError, HubError)


class Sent:
    def __init__(self) -> None:
        self.frames: list[Any] = []

    async def emit(self, frame: Any) -> None:
        self.frames.append(frame)


def invoke(monkeypatch: pytest.MonkeyPatch, call: Any, arguments: list[Any]) -> dict[str, Any]:
    async def no_limit(*args: Any) -> None:
        return None

    monkeypatch.setattr(ratelimit, "acheck", no_limit)
    monkeypatch.setitem(invocations.HUB_METHODS, "Try", methods.HubMethod("Try", 1, call))
    outbound = Sent()
    connection = SimpleNamespace(
        options=None, user_id=None, protocol=JsonProtocol, outbound=outbound
    )
    message = {"type": 1, "invocationId": "1", "target": "Try", "arguments": arguments}
    asyncio.run(invocations.Invocations().handle(connection, message))  # type: ignore[arg-type]
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


def test_an_uncharged_method_runs_without_a_rate_limit_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def limited(*args: Any) -> None:
        raise AssertionError("charged to the Redis rate limit")

    async def free(connection: Any) -> str:
        return "ran"

    monkeypatch.setattr(ratelimit, "acheck", limited)
    free_method = methods.HubMethod("Free", 0, free, charged=False)
    monkeypatch.setitem(invocations.HUB_METHODS, "Free", free_method)
    outbound = Sent()
    connection = SimpleNamespace(
        options=None, user_id=None, protocol=JsonProtocol, outbound=outbound
    )
    message = {"type": 1, "invocationId": "1", "target": "Free", "arguments": []}
    asyncio.run(invocations.Invocations().handle(connection, message))  # type: ignore[arg-type]
    (frame,) = outbound.frames
    assert json.loads(frame.rstrip("\x1e"))["result"] == "ran"
