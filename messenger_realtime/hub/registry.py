"""This process's live logical hub connections, by connection id.

A stateful reconnect's resume, and every long-polling or Server-Sent Events request,
finds its connection here: it lives in the process that opened it (sticky routing by
the `id` query parameter when several hub processes run; docs/hub.md). Daphne's shutdown
closes them all (hub/daphne/server.py).
"""

from typing import Any

CONNECTIONS: dict[str, Any] = {}  # connection id -> HubConnection
accepting = True  # False once this process shuts down: new connections are refused


def get(connection_id: str) -> Any:
    """The live connection with this id in this process, or None."""
    return CONNECTIONS.get(connection_id)


def add(connection_id: str, connection: Any) -> None:
    CONNECTIONS[connection_id] = connection


def remove(connection_id: str, connection: Any) -> None:
    if CONNECTIONS.get(connection_id) is connection:
        del CONNECTIONS[connection_id]


def live() -> list[Any]:
    return list(CONNECTIONS.values())
