"""Plain HTTP clients of the hub's long polling and Server-Sent Events endpoints, sending
exactly what each test needs (http.client: one request per connection)."""

import http.client
import json
from typing import Any

RS = "\x1e"
HUB = "/hubs/messenger"


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body  # headers: any case

    def records(self) -> list[dict[str, Any]]:
        """The JSON records of a poll's body."""
        text = self.body.decode()
        assert text.endswith(RS), f"unterminated {text!r}"
        return [json.loads(part) for part in text.split(RS)[:-1]]


def request(
    port: int,
    method: str,
    query: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 10,
    path: str = HUB,
) -> Response:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path + query, body=body or None, headers=headers or {})
        response = conn.getresponse()
        return Response(response.status, response.headers, response.read())
    finally:
        conn.close()


def negotiate(port: int, token: str, query: str = "?negotiateVersion=1") -> dict[str, Any]:
    response = request(port, "POST", query, headers=bearer(token), path=f"{HUB}/negotiate")
    assert response.status == 200, response.body
    return dict(json.loads(response.body))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class LongPoller:
    """One long-polling connection, driven request by request."""

    def __init__(self, port: int, token: str, protocol: str = "json") -> None:
        self.port, self.token = port, token
        self.connection_token = negotiate(port, token)["connectionToken"]
        self.polls = 0

    def poll(self, timeout: float = 10) -> Response:
        self.polls += 1
        query = f"?id={self.connection_token}&_={self.polls}"
        return request(self.port, "GET", query, headers=bearer(self.token), timeout=timeout)

    def send(self, body: str | bytes) -> Response:
        data = body.encode() if isinstance(body, str) else body
        query = f"?id={self.connection_token}"
        return request(self.port, "POST", query, data, bearer(self.token))

    def delete(self) -> Response:
        query = f"?id={self.connection_token}"
        return request(self.port, "DELETE", query, headers=bearer(self.token))

    def open(self, protocol: str = "json") -> None:
        """The first poll, the handshake and its answer."""
        first = self.poll()
        assert (first.status, first.body) == (200, b""), first.body
        assert self.send(json.dumps({"protocol": protocol, "version": 1}) + RS).status == 200
        assert self.poll().body == b"{}" + RS.encode()


class EventStream:
    """A Server-Sent Events GET whose events are read as they come."""

    def __init__(self, port: int, connection_token: str, token: str, timeout: float = 10) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        query = f"?id={connection_token}&access_token={token}"  # as EventSource sends it
        self.conn.request("GET", HUB + query, headers={"Accept": "text/event-stream"})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.headers = self.response.headers

    def line(self) -> bytes:
        return self.response.readline()

    def event(self) -> str:
        """The next event's data (its `data:` lines joined)."""
        data: list[str] = []
        while True:
            line = self.line()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\r\n")
            if not text and data:
                return "\n".join(data)
            if text.startswith("data: "):
                data.append(text[len("data: ") :])

    def records(self) -> list[dict[str, Any]]:
        text = self.event()
        assert text.endswith(RS), text
        return [json.loads(part) for part in text.split(RS)[:-1]]

    def close(self) -> None:
        self.conn.close()
