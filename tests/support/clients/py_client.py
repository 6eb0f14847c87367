"""A controllable pysignalr or signalrcore client for the tests, in its own process.

Usage: python py_client.py pysignalr|signalrcore URL TOKEN
Prints one JSON object per line, like node_client.mjs: {"state": "connected"} (then
"reconnected" on every later open), {"event": NAME, "payload": ...}, {"groups": [...]}.
Reads commands from stdin: "groups" (invoke GetGroups), "stop".
"""

import asyncio
import json
import os
import sys
import threading
from typing import Any

EVENTS = ("message_received", "chat_updated")
_print_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


class Opens:
    def __init__(self) -> None:
        self.count = 0

    def opened(self) -> None:
        self.count += 1
        emit({"state": "connected" if self.count == 1 else "reconnected"})


def run_pysignalr(url: str, token: str) -> None:
    from pysignalr.client import SignalRClient
    from pysignalr.messages import CompletionMessage

    # pysignalr applies access_token_factory only after its first upgrade; a header
    # authenticates negotiate and the WebSocket from the start.
    client = SignalRClient(
        url, headers={"Authorization": f"Bearer {token}"}, retry_sleep=0.2, retry_count=100
    )
    opens = Opens()

    def handler(name: str) -> Any:
        async def on_event(arguments: list[Any]) -> None:
            emit({"event": name, "payload": arguments[0]})

        return on_event

    async def on_open() -> None:
        opens.opened()

    async def on_error(message: CompletionMessage) -> None:
        emit({"invokeError": message.error})

    for name in EVENTS:
        client.on(name, handler(name))
    client.on_open(on_open)
    client.on_error(on_error)

    async def main() -> None:
        runner = asyncio.create_task(client.run())
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line == "groups":

                async def on_result(message: CompletionMessage) -> None:
                    emit({"groups": message.result})

                await client.send("GetGroups", [], on_result)
            elif line in ("stop", ""):
                runner.cancel()
                os._exit(0)

    asyncio.run(main())


def run_signalrcore(url: str, token: str) -> None:
    from signalrcore.hub_connection_builder import HubConnectionBuilder

    connection = (
        HubConnectionBuilder()
        .with_url(url, options={"access_token_factory": lambda: token})
        # Automatic reconnect also turns on signalrcore's keep-alive pings.
        .with_automatic_reconnect(
            {"type": "raw", "keep_alive_interval": 10, "reconnect_interval": 1, "max_attempts": 60}
        )
        .build()
    )
    opens = Opens()
    for name in EVENTS:
        connection.on(name, lambda args, name=name: emit({"event": name, "payload": args[0]}))
    connection.on_open(opens.opened)
    connection.on_reconnect(opens.opened)
    connection.on_error(lambda message: emit({"invokeError": message.error}))
    connection.start()
    for raw in sys.stdin:
        line = raw.strip()
        if line == "groups":
            connection.send("GetGroups", [], on_invocation=lambda m: emit({"groups": m.result}))
        elif line == "stop":
            break
    os._exit(0)  # signalrcore's stop() can block on its receive thread


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # the library's own story
    library, hub_url, access_token = sys.argv[1:4]
    {"pysignalr": run_pysignalr, "signalrcore": run_signalrcore}[library](hub_url, access_token)
