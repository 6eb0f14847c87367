"""The chaos soak's raw hub clients (bench/chaos.py): one process, many clients, each
logging what the checker reads (bench/chaos_checker.py) to one JSON-lines file.

    python bench/chaos_clients.py CONFIG_JSON_FILE

Config: {"log": path, "targets": [hub event names], "clients": [{"id", "user", "token",
"hub": "http://127.0.0.1:PORT"}, ...]}. Each client speaks the SignalR JSON hub protocol
over a raw WebSocket, so it sees what the official clients hide: the hub's Close and its
`allowReconnect`. It behaves as the web module does (realtime-client.js):
- it loads its chats over REST first (`GET /api/chats`: each stream's offset), then
  connects, and after every (re)connect invokes `Recover` with the offset it holds of
  each stream (contiguous, as StreamOffsets keeps it); a stream answered "resync" is
  loaded over REST again, one answered "forbidden" is forgotten;
- a `chat_updated` of its own user stream saying it joined a chat loads that chat over
  REST (its offset); one saying it left forgets the stream;
- a dropped connection or a Close is followed by a new one, 0.5-1.5 s later, for ever.
Records (one JSON object per line): {"c": client, "k": "got", "s": stream, "o": offset,
"t": epoch s, "lag": ms for a message_received (from its sentAt)}; {"k": "told", "s",
"o": the REST offset}; {"k": "closed", "a": allowReconnect}; {"k": "connected"};
{"k": "recovered"} where the Recover's completion came among the events.

Commands on stdin, one JSON line each: {"cmd": "pause", "client": id, "seconds": S}
(the client stops reading its socket: a client that stops reading), {"cmd": "census"}
-> {"connected": n, "clients": n} on stdout, {"cmd": "stop"} (or end of stdin).
"""

import asyncio
import contextlib
import json
import random
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any, TextIO

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

RS = "\x1e"
HANDSHAKE = json.dumps({"protocol": "json", "version": 1}) + RS
PING = json.dumps({"type": 6}) + RS
PING_EVERY = 10.0


class Offsets:
    """Each stream's contiguous offset, as the web module's StreamOffsets keeps it."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.ahead: dict[str, set[int]] = {}

    def start(self, stream: str, offset: int) -> None:
        self.held[stream] = max(self.held.get(stream, -1), offset)
        self._advance(stream)

    def note(self, stream: str, offset: int) -> None:
        if stream not in self.held:
            self.held[stream] = offset
        elif offset > self.held[stream]:
            self.ahead.setdefault(stream, set()).add(offset)
            self._advance(stream)

    def _advance(self, stream: str) -> None:
        ahead = self.ahead.get(stream)
        if not ahead:
            return
        offset = self.held[stream]
        ahead.difference_update({o for o in ahead if o <= offset})
        while offset + 1 in ahead:
            offset += 1
            ahead.discard(offset)
        self.held[stream] = offset
        if not ahead:
            del self.ahead[stream]

    def forget(self, stream: str) -> None:
        self.held.pop(stream, None)
        self.ahead.pop(stream, None)


class Client:
    def __init__(self, spec: dict[str, Any], log: TextIO, targets: set[str]) -> None:
        self.id, self.user, self.token = spec["id"], spec["user"], spec["token"]
        self.hub, self.log, self.targets = spec["hub"], log, targets
        self.offsets = Offsets()
        self.ws: ClientConnection | None = None
        self.paused_until = 0.0
        self.calls: dict[str, asyncio.Future[Any]] = {}
        self.next_call = 0
        self.loads: set[asyncio.Task[None]] = set()

    def record(self, kind: str, **fields: Any) -> None:
        self.log.write(json.dumps({"c": self.id, "k": kind, "t": time.time(), **fields}) + "\n")

    # -- REST ------------------------------------------------------------------------

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.hub}{path}")
        request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    async def load(self, chat: str | None = None) -> None:
        """Load every chat (and the user stream) or one chat over REST, until it answers."""
        for attempt in range(1000):
            try:
                if chat is None:
                    page = await asyncio.to_thread(self._get, "/api/chats")
                    for item in [page["user"], *page["chats"]]:
                        self.offsets.start(item["stream"], item["offset"])
                        self.record("told", s=item["stream"], o=item["offset"])
                else:
                    item = await asyncio.to_thread(self._get, f"/api/chats/{chat}")
                    self.offsets.start(item["stream"], item["offset"])
                    self.record("told", s=item["stream"], o=item["offset"])
                return
            except urllib.error.HTTPError as error:
                if error.code == 404:  # no longer a member: nothing of it is owed
                    self.offsets.forget(f"chat:{chat}")
                    return
            except Exception:
                pass
            await asyncio.sleep(min(0.5 * (attempt + 1), 3))

    def load_later(self, chat: str | None) -> None:
        task = asyncio.create_task(self.load(chat))
        self.loads.add(task)
        task.add_done_callback(self.loads.discard)

    # -- the hub ---------------------------------------------------------------------

    def _negotiate(self) -> str:
        url = f"{self.hub}/hubs/messenger/negotiate?negotiateVersion=1"
        request = urllib.request.Request(url, method="POST", data=b"")
        request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read())["connectionToken"])

    async def _open(self) -> ClientConnection:
        token = await asyncio.to_thread(self._negotiate)
        url = self.hub.replace("http", "ws", 1) + f"/hubs/messenger?id={token}"
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {self.token}"})
        await ws.send(HANDSHAKE)
        if (answer := await asyncio.wait_for(ws.recv(), 15)) != "{}" + RS:
            await ws.close()
            raise RuntimeError(f"handshake refused: {answer!r}")
        return ws

    async def run(self) -> None:
        await self.load()
        while True:
            try:
                self.ws = await self._open()
            except Exception:
                await asyncio.sleep(random.uniform(0.5, 1.5))
                continue
            self.record("connected")
            pinger = asyncio.create_task(self._keepalive(self.ws))
            recover = asyncio.create_task(self._recover())
            try:
                await self._read(self.ws)
            finally:
                pinger.cancel()
                recover.cancel()
                for call in self.calls.values():
                    call.cancel()
                self.calls.clear()
                self.ws = None
            await asyncio.sleep(random.uniform(0.5, 1.5))

    async def _keepalive(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(PING_EVERY)
                await ws.send(PING)

    async def _recover(self) -> None:
        """After a (re)connect: every stream from the offset held; REST where told."""
        assert self.ws is not None
        self.next_call += 1
        call_id = str(self.next_call)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls[call_id] = future
        asked = dict(self.offsets.held)
        message = {"type": 1, "invocationId": call_id, "target": "Recover", "arguments": [asked]}
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(message) + RS)
            completion = await future
            if "error" in completion:
                raise RuntimeError(f"Recover failed: {completion['error']}")
            for stream, outcome in completion["result"].items():
                if outcome == "forbidden":
                    self.offsets.forget(stream)
                elif outcome != "recovered":
                    kind, _, ident = stream.partition(":")
                    self.load_later(ident if kind == "chat" else None)

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for frame in ws:
                if (pause := self.paused_until - time.monotonic()) > 0:
                    await asyncio.sleep(pause)  # a client that stopped reading
                text = frame if isinstance(frame, str) else frame.decode()
                for raw in text.split(RS)[:-1]:
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == 1 and message.get("target") in self.targets:
                        self._event(message["target"], message["arguments"][0])
                    elif kind == 3 and (call := self.calls.pop(message["invocationId"], None)):
                        if "error" not in message:  # (Recover is the only invocation)
                            self.record("recovered")  # where it came among the events
                        if not call.done():
                            call.set_result(message)
                    elif kind == 7:
                        self.record("closed", a=bool(message.get("allowReconnect")))
                        return

    def _event(self, target: str, payload: dict[str, Any]) -> None:
        stream, offset = payload.get("stream"), payload.get("offset")
        if not isinstance(stream, str) or not isinstance(offset, int):
            return
        fields: dict[str, Any] = {"s": stream, "o": offset}
        if target == "message_received" and "sentAt" in payload:
            sent = datetime.fromisoformat(payload["sentAt"].replace("Z", "+00:00"))
            fields["lag"] = round((time.time() - sent.timestamp()) * 1000, 1)
        self.record("got", **fields)
        self.offsets.note(stream, offset)
        if target == "chat_updated" and stream == f"user:{self.user}":
            chat, change = payload.get("chatId"), payload.get("change")
            if change == "ChatCreated" or (
                change == "ParticipantAdded" and payload.get("userId") == self.user
            ):
                self.load_later(chat)
            elif change == "ParticipantRemoved" and payload.get("userId") == self.user:
                self.offsets.forget(f"chat:{chat}")


async def main() -> None:
    with open(sys.argv[1]) as f:
        config = json.load(f)
    log = open(config["log"], "a", buffering=1 << 16)  # noqa: SIM115 (closed at the end)
    targets = set(config["targets"])
    clients = {spec["id"]: Client(spec, log, targets) for spec in config["clients"]}
    tasks = [asyncio.create_task(c.run()) for c in clients.values()]
    stdin = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(stdin)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    try:
        while line := await stdin.readline():
            command = json.loads(line)
            if command["cmd"] == "pause":
                if (client := clients.get(command["client"])) is not None:  # else another's
                    client.paused_until = time.monotonic() + command["seconds"]
            elif command["cmd"] == "census":
                up = sum(c.ws is not None for c in clients.values())
                print(json.dumps({"connected": up, "clients": len(clients)}), flush=True)
            elif command["cmd"] == "flush":
                log.flush()
                print(json.dumps({"flushed": True}), flush=True)
            elif command["cmd"] == "stop":
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.close()


if __name__ == "__main__":
    asyncio.run(main())
