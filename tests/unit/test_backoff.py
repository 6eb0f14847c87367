"""backoff_seconds is a pure function of (attempts, options, random)."""

import pytest

from messenger_realtime.dispatch.backoff import backoff_seconds, delay_table
from tests.support.helpers import options


@pytest.mark.parametrize(
    ("attempts", "rand", "expected"),
    [
        (1, 0.0, 2.0),  # BACKOFF_BASE
        (2, 0.0, 4.0),
        (3, 0.0, 8.0),
        (6, 0.0, 64.0),
        (7, 0.0, 120.0),  # capped at BACKOFF_CAP (2 min)
        (50, 0.0, 120.0),
        (5000, 0.0, 120.0),  # factor**n overflow still yields the cap
        (1, 1.0, 1.6),  # full jitter draw: 20 % earlier
        (7, 0.5, 108.0),  # jitter never exceeds the cap
    ],
)
def test_backoff_table(attempts: int, rand: float, expected: float) -> None:
    assert backoff_seconds(attempts, options(), lambda: rand) == pytest.approx(expected)


def test_backoff_follows_configured_base_factor_cap() -> None:
    opts = options(backoff_base=0.5, backoff_factor=3.0, backoff_cap=10.0, backoff_jitter=0.0)
    assert [backoff_seconds(n, opts, lambda: 0.7) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10.0]


def test_delay_table_covers_every_attempt_up_to_max_plus_one() -> None:
    table = delay_table(options(max_attempts=3, backoff_jitter=0.0))
    assert table == [2.0, 4.0, 8.0, 16.0]


def test_liveness_allows_the_slowest_batch_and_turns_red_without_beats() -> None:
    from messenger_realtime.dispatch.dispatcher import stale_after
    from messenger_realtime.ops.health import Liveness

    o = options()
    slowest = o.max_run_duration + o.publish_timeout + o.build_timeout + o.hub_backlog_wait
    assert stale_after(o) >= slowest  # a pass stuck on a read's deadline is still alive
    liveness = Liveness(stale_after=10.0, connected=True)
    assert liveness.state()[:2] == (True, True)
    liveness.heartbeat -= 11.0  # no beat for longer than the window
    assert liveness.state()[:2] == (False, False)
