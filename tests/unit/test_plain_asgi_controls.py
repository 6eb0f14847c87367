"""The hub's own ServerControls for a plain ASGI server (hub/transports/plain_asgi.py):
writes never wait, go out in order, stay within SEND_BUFFER_LIMIT past which the hub is
told once, and the end follows what was written."""

import asyncio
from typing import Any

from messenger_realtime.hub.transports.plain_asgi import PlainAsgiControls
from tests.support.runtime import await_until, run


class Server:
    """An ASGI send that takes nothing while `stalled` is clear (a client not reading)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.stalled = asyncio.Event()
        self.stalled.set()

    async def send(self, message: dict[str, Any]) -> None:
        await self.stalled.wait()
        self.sent.append(message)


def test_writes_go_out_in_order_as_standard_messages_then_the_close() -> None:
    async def scenario() -> None:
        server = Server()
        controls = PlainAsgiControls.websocket(server.send)
        assert controls.write_now("a") and controls.write_now(b"b") and controls.write_now("c")
        assert controls.close_after_writes()
        assert controls.write_now("after the end")  # taken, and dropped
        await await_until(lambda: len(server.sent) == 4, what="everything sent")
        assert server.sent == [
            {"type": "websocket.send", "text": "a"},
            {"type": "websocket.send", "bytes": b"b"},
            {"type": "websocket.send", "text": "c"},
            {"type": "websocket.close"},
        ]
        assert controls.unsent() == 0

    run(scenario())


def test_past_the_bound_the_hub_is_told_once_and_the_buffer_stays_within_it() -> None:
    async def scenario() -> None:
        server = Server()
        server.stalled.clear()
        told: list[int] = []
        controls = PlainAsgiControls.websocket(server.send)
        controls.bound(100, told.append)
        for _ in range(30):
            controls.write_now("x" * 10)
            assert controls.unsent() <= 100
            await asyncio.sleep(0)  # the writer takes the first message and waits on it
        assert len(told) == 1 and told[0] > 100
        controls.write_now("close")  # the hub's Close fits once what waited was dropped
        controls.close_after_writes()
        server.stalled.set()
        await await_until(lambda: server.sent[-1:] == [{"type": "websocket.close"}])
        assert server.sent[-2] == {"type": "websocket.send", "text": "close"}
        assert len(told) == 1

    run(scenario())


def test_a_send_the_server_refuses_ends_every_write_after_it() -> None:
    async def scenario() -> None:
        calls: list[dict[str, Any]] = []

        async def gone(message: dict[str, Any]) -> None:
            calls.append(message)
            raise OSError("the socket went")

        controls = PlainAsgiControls.websocket(gone)
        controls.write_now("a")
        await await_until(lambda: controls.closed, what="the refusal noticed")
        controls.write_now("b")
        controls.close_after_writes()  # nothing more starts: the writer stays stopped
        assert calls == [{"type": "websocket.send", "text": "a"}]

    run(scenario())
