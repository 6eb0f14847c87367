"""A stand-in for a hub transport (hub/transports/base.py) in tests that drive
HubConnection directly: a subclass says what send() keeps; close() is recorded."""

import asyncio
from typing import Any


class FakeTransport:
    name, binary_ok, inherent_keepalive = "WebSockets", True, False

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def send(self, frame: Any) -> None:
        raise NotImplementedError

    async def close(self, *, drop: bool = False) -> None:
        self.closed.set()

    def unsent(self) -> int:
        return 0

    def send_now(self, frame: Any) -> bool:
        return False

    def take_pings(self, heard: Any) -> None: ...

    def use_binary(self, binary: bool) -> None: ...

    def idle_since(self) -> None:
        return None

    def lingers(self) -> bool:
        return False
