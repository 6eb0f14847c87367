"""Long polling's queue and polls (the transport alone, with stand-in polls): what a poll
gets, a newer poll superseding a pending one, the bound, and the end of a connection."""

import asyncio
from types import SimpleNamespace
from typing import Any

from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.transports.longpolling import LongPollingTransport
from tests.support.runtime import run

OPTIONS = SimpleNamespace(send_buffer_limit=100, long_poll_timeout=30, disconnect_timeout=30)


class Poll:
    def __init__(self) -> None:
        self.answers: list[tuple[int, bytes]] = []

    async def respond(self, status: int, body: bytes = b"", headers: Any = None) -> None:
        self.answers.append((status, body))


class Connection:
    connection_id = "c1"

    def __init__(self) -> None:
        self.overflows: list[Any] = []
        self.closing = False

    async def send_overflow(self, unsent: Any) -> None:
        self.overflows.append(unsent)
        self.closing = True  # as HubConnection.drop, before it sends the Close


async def settle() -> None:
    """Let the transport's call_soon / tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


def polling() -> LongPollingTransport:
    """A transport whose process is a fresh one (nothing else registered)."""
    return LongPollingTransport(OPTIONS, HubProcess().forget)


def test_a_pending_poll_gets_what_is_sent_in_the_same_turn_in_one_answer() -> None:
    async def scenario() -> list[tuple[int, bytes]]:
        transport, poll = polling(), Poll()
        await transport.take_poll(poll)
        assert transport.idle_since() is None  # a poll is pending: the client is reachable
        await transport.send("a")
        await transport.send(b"b")
        await settle()
        return poll.answers

    assert run(scenario()) == [(200, b"ab")]


def test_a_newer_poll_answers_the_pending_one_with_204() -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        transport, older, newer = polling(), Poll(), Poll()
        await transport.take_poll(older)
        await transport.take_poll(newer)
        await transport.send("x")
        await settle()
        return older.answers, newer.answers

    assert run(scenario()) == ([(204, b"")], [(200, b"x")])


def test_an_abandoned_poll_leaves_the_queue_for_the_next_one() -> None:
    async def scenario() -> list[Any]:
        transport, gone, next_poll = (
            polling(),
            Poll(),
            Poll(),
        )
        await transport.take_poll(gone)
        transport.poll_gone(gone)
        assert transport.idle_since() is not None
        await transport.send("kept")
        await transport.take_poll(next_poll)
        return gone.answers + next_poll.answers

    assert run(scenario()) == [(200, b"kept")]


def test_past_the_bound_the_queue_is_dropped_and_the_connection_told() -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        transport, connection, poll = (
            polling(),
            Connection(),
            Poll(),
        )
        transport.connection = connection
        await transport.send("x" * 60)
        await transport.send("y" * 60)  # 120 > 100: nobody polls fast enough
        await transport.send("z")  # an event sent before the connection heard of it
        await settle()
        await transport.send("close")  # the Close that follows still goes out
        await transport.take_poll(poll)
        return connection.overflows, poll.answers

    assert run(scenario()) == ([120], [(200, b"close")])


def test_an_ended_connection_hands_over_its_last_words_then_answers_204() -> None:
    async def scenario() -> list[Any]:
        hub = HubProcess()
        transport, connection = LongPollingTransport(OPTIONS, hub.forget), Connection()
        transport.connection = connection
        hub.connections[connection.connection_id] = connection
        await transport.send("bye")
        await transport.close()
        assert transport.lingers() and hub.get("c1") is connection
        first, second = Poll(), Poll()
        await transport.take_poll(first)
        await transport.take_poll(second)
        assert hub.get("c1") is None  # forgotten after the 204
        return first.answers + second.answers

    assert run(scenario()) == [(200, b"bye"), (204, b"")]
