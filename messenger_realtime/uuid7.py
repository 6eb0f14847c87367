"""UUIDv7 ids made by the app (Python 3.11 has no uuid.uuid7).

Layout per RFC 9562: 48-bit unix milliseconds, version 7, a 12-bit counter in rand_a
(method 1, so ids made in the same millisecond by this process still sort in creation
order), variant, 62 random bits.
"""

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    """A new time-ordered UUIDv7."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _counter = ms, int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            # Same (or an earlier, if the clock stepped back) millisecond: keep order by
            # counting up; on overflow borrow the next millisecond.
            _counter += 1
            if _counter > 0xFFF:
                _last_ms, _counter = _last_ms + 1, 0
            ms = _last_ms
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms << 80) | (0x7 << 76) | (_counter << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)
