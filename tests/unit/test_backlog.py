"""Backpressure ignores a hub process whose queue nobody drains (a dead process)."""

import time

from messenger_realtime.backplane.backlog import QueueState, QueueWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queues(**depths: int) -> dict[str, QueueState]:
    """Queues with young heads (`time.time()` now): only their depths matter."""
    return {key: QueueState(depth, time.time()) for key, depth in depths.items()}


def test_a_draining_queue_counts_and_a_stalled_one_stops_counting() -> None:
    clock = Clock()
    watch = QueueWatch(clock, stall_after=0.5)
    assert watch.longest_draining(queues(live=300, dead=10_000)) == 10_000  # both new
    clock.now += 0.3
    assert watch.longest_draining(queues(live=250, dead=10_000)) == 10_000
    clock.now += 0.3  # the dead queue has not shrunk for 0.6 s; the live one just did
    assert watch.longest_draining(queues(live=240, dead=10_000)) == 240
    clock.now += 0.3
    assert watch.longest_draining(queues(live=240, dead=10_000)) == 240  # 0.3 s: still live


def test_a_stalled_queue_counts_again_once_it_drains() -> None:
    clock = Clock()
    watch = QueueWatch(clock, stall_after=0.5)
    watch.longest_draining(queues(q=900))
    clock.now += 1.0
    assert watch.longest_draining(queues(q=900)) == 0  # stalled: the process is gone
    clock.now += 0.1
    assert watch.longest_draining(queues(q=800)) == 800  # it drains again (restarted)


def test_a_dead_queue_shrinking_only_by_the_expiry_sweep_stays_left_out() -> None:
    """A dead process's queue shrinks too, once its messages pass the layer's expiry
    (every push sweeps them): the chaos soak saw every push wait up to STALL_AFTER
    behind such a queue from a minute after a Daphne was killed. A queue read by a live
    process has a young head; one only swept has a head as old as the expiry."""
    clock, wall = Clock(), Clock()
    wall.now = 10_000.0
    watch = QueueWatch(clock, stall_after=0.5, wall=wall, head_age_limit=30.0)
    watch.longest_draining({"dead": QueueState(600, 9_940.0), "live": QueueState(300, 9_999.0)})
    clock.now += 1.0
    wall.now += 1.0
    swept = {"dead": QueueState(590, 9_941.0), "live": QueueState(250, 10_000.5)}
    assert watch.longest_draining(swept) == 250  # the dead one shrank, 60 s old at its head
    clock.now += 0.1
    wall.now += 0.1
    behind = {"dead": QueueState(580, 9_941.1), "live": QueueState(900, 9_990.0)}
    assert watch.longest_draining(behind) == 900  # 11 s behind, still being read


def test_an_empty_queue_has_no_head_and_counts_as_its_depth() -> None:
    watch = QueueWatch(Clock(), stall_after=0.5, wall=Clock(), head_age_limit=30.0)
    assert watch.longest_draining({"q": QueueState(0, None)}) == 0
