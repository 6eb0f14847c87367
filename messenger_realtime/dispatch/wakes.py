"""Coalesced wake-ups: at moderate rates one pass serves several commits, not each one.

Every owner commit NOTIFYs. At a few hundred commits a second each NOTIFY used to wake a
pass of one or two rows, and a pass has a fixed cost (the lease stamp, the walk, the
claim, the suspect probe, the build thread hop, the outcome), so the worker spent more CPU
per message at 500 msg/s than at 1,000 (docs/performance.md). The rule here: a pass starts
at most once per WAKE_COALESCE while rows keep coming. A NOTIFY that arrives less than
WAKE_COALESCE after the start of a pass that found rows waits for the rest of that window
(or until a batch's worth of commits have notified) and then one pass serves them all.
A NOTIFY after a quiet spell (the last pass started longer ago, or found nothing) wakes a
pass at once, so an isolated event pays no extra latency; during a stream an event waits
at most WAKE_COALESCE more. WAKE_COALESCE = 0 turns coalescing off.
"""

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Wake:
    """Why an idle wait ended, and what the wake-up coalesced."""

    notified: bool  # by a NOTIFY (else: the poll timeout, stop, or a lost lease)
    notifies: int = 0  # NOTIFYs this wake read (commits it serves), the first included
    held: float = 0.0  # seconds spent waiting for more after the first

    def log_fields(self) -> dict[str, object]:
        reason = "notify" if self.notified else "poll"
        return {"reason": reason, "notifies": self.notifies, "heldMs": round(self.held * 1000, 1)}


class WakePolicy:
    """When a NOTIFY may wake a pass: the window after the last pass that found rows."""

    def __init__(self, window: float, batch_size: int) -> None:
        self.window = window
        self.enough = max(1, batch_size)  # this many commits fill a batch: no point waiting
        self.last_pass_started = float("-inf")
        self.last_pass_found_rows = False

    def pass_started(self) -> None:
        self.last_pass_started = time.monotonic()

    def pass_ended(self, found_rows: bool) -> None:
        self.last_pass_found_rows = found_rows

    def hold_until(self) -> float | None:
        """The monotonic time a NOTIFY arriving now should wait for, or None: wake now."""
        if self.window <= 0 or not self.last_pass_found_rows:
            return None
        until = self.last_pass_started + self.window
        return until if until > time.monotonic() else None
