"""Plain HTTP over real sockets (urllib): a GET for probes, a tiny JSON client for the API."""

import json
import re
import urllib.error
import urllib.request
from typing import Any


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    """Status and text of a GET; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


class Api:
    def __init__(self, base: str, token: str | None) -> None:
        self.base = base
        self.token = token

    def call(
        self, method: str, path: str, data: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        payload = (
            raw if raw is not None else (json.dumps(data).encode() if data is not None else None)
        )
        request = urllib.request.Request(self.base + path, data=payload, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read()
            if text and error.headers.get_content_type() != "application/json":
                return error.code, text.decode(errors="replace")  # a proxy's page (a 502)
            return error.code, json.loads(text) if text else None

    def ok(self, method: str, path: str, data: Any = None) -> Any:
        status, body = self.call(method, path, data)
        assert 200 <= status < 300, (method, path, status, body)
        return body


def sample(text: str, name: str, **labels: str) -> float:
    """One sample's value from Prometheus text (0 if absent)."""
    label = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{{{re.escape(label)}}} (\S+)$" if label else rf"^{name} (\S+)$"
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else 0.0


def client_deliveries(
    base_url: str, kind: str = "message_received", transport: str = "WebSockets"
) -> tuple[float, float]:
    """(how many `kind` deliveries a Daphne measured to acknowledging clients, their total
    seconds): messenger_realtime_hub_client_delivery_seconds, from its /metrics."""
    status, text = http_get(f"{base_url}/metrics", timeout=5)
    assert status == 200, status
    name = "messenger_realtime_hub_client_delivery_seconds"
    return (
        sample(text, f"{name}_count", kind=kind, transport=transport),
        sample(text, f"{name}_sum", kind=kind, transport=transport),
    )
