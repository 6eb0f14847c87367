"""Stateful reconnect's bookkeeping: the replay buffer's numbering, acks and bound, and
the inbound numbering that drops duplicates after a resume."""

import pytest

from messenger_realtime.exceptions import SequenceError
from messenger_realtime.hub.connection.replay import InboundSequence, ReplayBuffer


def test_replay_buffer_numbers_from_one_and_keeps_what_is_not_acked() -> None:
    buffer = ReplayBuffer(limit=100)
    for frame in ("a", "b", "c"):
        assert buffer.add(frame)
    assert (buffer.first_id(), buffer.next_id, buffer.size) == (1, 4, 3)
    buffer.ack(2)
    assert buffer.frames_after(0) == [(3, "c")]
    assert (buffer.first_id(), buffer.size) == (3, 1)
    assert buffer.frames_after(3) == []


def test_an_ack_beyond_what_was_sent_empties_the_buffer_and_the_next_id_goes_on() -> None:
    buffer = ReplayBuffer(limit=100)
    buffer.add("a")
    buffer.ack(99)
    assert (buffer.first_id(), buffer.size) == (2, 0)  # a resume's Sequence: the next id
    buffer.add("b")
    assert buffer.frames_after(0) == [(2, "b")]


def test_past_its_limit_the_buffer_gives_up_for_good_but_keeps_numbering() -> None:
    buffer = ReplayBuffer(limit=5)
    assert buffer.add("abc")
    assert not buffer.add("def")  # 6 bytes unacked: over
    assert (buffer.resumable, buffer.size, buffer.frames_after(0)) == (False, 0, [])
    buffer.ack(2)  # acks cannot bring back what was dropped
    assert not buffer.add("g")
    assert (buffer.resumable, buffer.next_id) == (False, 4)


def test_inbound_numbering_drops_what_was_seen_after_a_sequence() -> None:
    inbound = InboundSequence()
    assert [inbound.accept() for _ in range(3)] == [True, True, True]
    assert inbound.ack_due() == 3
    assert inbound.ack_due() is None  # nothing new since
    inbound.sequence(2)  # the client resends from its message 2
    assert [inbound.accept() for _ in range(3)] == [False, False, True]
    assert (inbound.latest, inbound.ack_due()) == (4, 4)


def test_a_sequence_beyond_what_was_received_is_an_error() -> None:
    inbound = InboundSequence()
    inbound.accept()
    inbound.sequence(2)  # the next one: fine
    with pytest.raises(SequenceError, match="greater than amount of messages"):
        inbound.sequence(3)
