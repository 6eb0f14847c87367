"""The floor under a hub connection: Daphne, Twisted and Autobahn with no hub (issue 27).

    .venv/bin/python bench/connections.py --app bench.floor_app:application ...

serves this ASGI application instead of the project: negotiate answers a fixed body, the
WebSocket is accepted and the JSON handshake answered, pings are read and dropped. No
authentication, no database, no groups, no Django. What Daphne spends per connection
here is what any ASGI application served by Daphne pays for the same two requests, so
the hub's own share is the difference.
"""

import uuid
from typing import Any

NEGOTIATE = (
    b'{"negotiateVersion":1,"connectionId":"%s","connectionToken":"%s",'
    b'"availableTransports":[{"transport":"WebSockets","transferFormats":["Text","Binary"]}]}'
)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        while (await receive()).get("more_body"):
            pass
        token = uuid.uuid4().hex.encode()
        body = NEGOTIATE % (token, token)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            if '"protocol"' in (message.get("text") or ""):  # the handshake; pings dropped
                await send({"type": "websocket.send", "text": "{}\x1e"})
