"""Backpressure ignores a hub process whose queue nobody drains (a dead process)."""

from messenger_realtime.backplane.backlog import QueueWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_draining_queue_counts_and_a_stalled_one_stops_counting() -> None:
    clock = Clock()
    watch = QueueWatch(clock, stall_after=0.5)
    assert watch.longest_draining({"live": 300, "dead": 10_000}) == 10_000  # both new
    clock.now += 0.3
    assert watch.longest_draining({"live": 250, "dead": 10_000}) == 10_000
    clock.now += 0.3  # the dead queue has not shrunk for 0.6 s; the live one just did
    assert watch.longest_draining({"live": 240, "dead": 10_000}) == 240
    clock.now += 0.3
    assert watch.longest_draining({"live": 240, "dead": 10_000}) == 240  # 0.3 s: still live


def test_a_stalled_queue_counts_again_once_it_drains() -> None:
    clock = Clock()
    watch = QueueWatch(clock, stall_after=0.5)
    watch.longest_draining({"q": 900})
    clock.now += 1.0
    assert watch.longest_draining({"q": 900}) == 0  # stalled: the process is gone
    clock.now += 0.1
    assert watch.longest_draining({"q": 800}) == 800  # it drains again (restarted)
