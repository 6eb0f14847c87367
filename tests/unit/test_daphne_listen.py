"""The hub's Daphne listens with a backlog a reconnect storm fits in
(hub/daphne/capacity.py, with_backlog): added to Daphne's endpoints that take one,
never over an operator's own."""

import pytest

from messenger_realtime.hub.daphne.capacity import LISTEN_BACKLOG, with_backlog


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        # daphne -b/-p and -u build these
        (
            "tcp:port=8000:interface=0.0.0.0",
            f"tcp:port=8000:interface=0.0.0.0:backlog={LISTEN_BACKLOG}",
        ),
        (
            r"tcp:port=8000:interface=\:\:1",
            rf"tcp:port=8000:interface=\:\:1:backlog={LISTEN_BACKLOG}",
        ),
        ("unix:/run/hub.sock", f"unix:/run/hub.sock:backlog={LISTEN_BACKLOG}"),
        # an operator's own backlog (daphne -e) wins
        (
            "tcp:port=8000:backlog=128:interface=127.0.0.1",
            "tcp:port=8000:backlog=128:interface=127.0.0.1",
        ),
        # a socket its owner already listened on (daphne --fd) takes none
        ("fd:fileno=3", "fd:fileno=3"),
    ],
)
def test_an_endpoint_gets_the_backlog_unless_it_has_one(endpoint: str, expected: str) -> None:
    assert with_backlog(endpoint) == expected


def test_an_escaped_colon_in_a_value_is_not_a_parameter() -> None:
    # "backlog=" inside an escaped value is not a backlog parameter
    endpoint = r"unix:/tmp/a\:backlog=1"
    assert with_backlog(endpoint) == f"{endpoint}:backlog={LISTEN_BACKLOG}"
