"""Exponential backoff with jitter, as a pure function of (attempts, options, random)."""

from collections.abc import Callable

from messenger_realtime.conf.settings import RealtimeDispatchOptions


def backoff_seconds(
    attempts: int, options: RealtimeDispatchOptions, rand: Callable[[], float]
) -> float:
    """Delay before the next try after `attempts` tries (attempts >= 1).

    base * factor^(attempts-1), capped at BACKOFF_CAP, then shortened by up to
    BACKOFF_JITTER of itself (rand() in [0, 1)). The cap therefore stays a hard upper
    bound.
    """
    exponent = max(attempts, 1) - 1
    try:
        delay = min(options.backoff_cap, options.backoff_base * options.backoff_factor**exponent)
    except OverflowError:  # factor**exponent beyond float range: the cap applies anyway
        delay = options.backoff_cap
    return delay * (1.0 - options.backoff_jitter * rand())


def delay_table(options: RealtimeDispatchOptions) -> list[float]:
    """Un-jittered delays for attempts 1..MAX_ATTEMPTS+1, indexed by attempts-1.

    The claim (sql.WALK_AND_CLAIM) applies the jitter per row with the database's random(), which
    is backoff_seconds() with rand = random(): rows that fail together, even in one claim,
    do not come due together.
    """
    return [backoff_seconds(n, options, lambda: 0.0) for n in range(1, options.max_attempts + 2)]
