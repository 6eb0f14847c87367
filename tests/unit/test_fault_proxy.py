"""The test support's fault proxy (tests/support/proxy.py), on which the network tests
and the chaos soak's network faults rest: a partition holds bytes and new connections
and delivers them, in order, when it heals; latency applies to open flows; silence
forwards nothing and tells neither end. Against a loopback echo server."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback server echoing every byte back on each connection; its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def proxy(echo: int) -> Iterator[TcpProxy]:
    made = TcpProxy(echo)
    yield made
    made.close()


def connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def nothing_within(conn: socket.socket, seconds: float) -> bool:
    """No byte arrives within `seconds` (the connection stays open)."""
    conn.settimeout(seconds)
    try:
        return not conn.recv(1)  # b"": closed, which is not "nothing" either
    except TimeoutError:
        return True
    finally:
        conn.settimeout(5)


def test_a_partition_holds_every_byte_and_new_connection_until_it_heals(
    proxy: TcpProxy,
) -> None:
    conn = connect(proxy)
    conn.sendall(b"a")
    assert conn.recv(1) == b"a"
    proxy.partition()
    conn.sendall(b"bc")
    late = connect(proxy)  # accepted, held from the server
    late.sendall(b"x")
    assert nothing_within(conn, 0.3) and nothing_within(late, 0.3)
    proxy.heal()
    assert conn.recv(2) == b"bc"  # what was held, in order, nothing lost
    assert late.recv(1) == b"x"
    conn.close()
    late.close()


def test_latency_applies_to_open_flows_each_way(proxy: TcpProxy) -> None:
    conn = connect(proxy)
    conn.sendall(b"a")
    assert conn.recv(1) == b"a"
    proxy.delay = 0.2
    began = time.monotonic()
    conn.sendall(b"b")
    assert conn.recv(1) == b"b"
    assert time.monotonic() - began >= 0.4  # 0.2 s to the server, 0.2 s back
    proxy.delay = 0.0
    conn.close()


def test_a_silent_flow_forwards_nothing_and_new_connections_still_work(
    proxy: TcpProxy,
) -> None:
    conn = connect(proxy)
    conn.sendall(b"a")
    assert conn.recv(1) == b"a"
    assert proxy.open_flows() == 1
    assert proxy.silence() == 1
    assert proxy.open_flows() == 0
    conn.sendall(b"b")
    assert nothing_within(conn, 0.3)  # no byte, no FIN, no RST
    fresh = connect(proxy)
    fresh.sendall(b"c")
    assert fresh.recv(1) == b"c"
    conn.close()
    fresh.close()


def test_a_cut_link_refuses_until_restored(proxy: TcpProxy) -> None:
    conn = connect(proxy)
    conn.sendall(b"a")
    assert conn.recv(1) == b"a"
    proxy.cut()
    assert conn.recv(1) == b""  # dropped: the end is told
    refused = connect(proxy)
    assert refused.recv(1) == b""  # accepted by the listener, closed at once
    proxy.restore()
    again = connect(proxy)
    again.sendall(b"d")
    assert again.recv(1) == b"d"
    for s in (conn, refused, again):
        s.close()
