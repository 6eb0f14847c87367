"""The old name of reservations.py, kept only for hub/'s four imports (hub/fanout.py,
hub/transports/opening.py, hub/connection/groups.py and lifecycle.py): hub/connection/
is being refactored in parallel (issue 47), so they switch to ConnectionReservation with
it, and this module goes. "Claim" is the worker's word for taking outbox rows."""

from messenger_realtime.backplane.reservations import USED, ConnectionReservation

Claim = ConnectionReservation

__all__ = ["USED", "Claim"]
