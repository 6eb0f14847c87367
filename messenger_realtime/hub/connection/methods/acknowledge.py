"""The `Acknowledge` hub method: the client holds its streams up to these offsets, so
the hub can measure how long each live event took from its commit to the client
(hub/connection/acknowledgements.py, messenger_realtime_hub_client_delivery_seconds).

The web client module calls it with the streams that moved and how long ago it had the
first event it acknowledges, five seconds after that first event (a client without
stateful reconnect has no other way to tell). The first
call makes the connection's acknowledgements part: events sent from then on are
measured. Nothing is returned and nothing changes for delivery or recovery (`Recover`
still takes its own offsets).

Its cost: one unit of the connection's budget, and one more per 64 streams it names;
not charged to the user's rate limit in Redis (a client acknowledging every few seconds
would spend a good part of it): every call is local and bounded (at most ACKNOWLEDGED
streams, each compared with at most acknowledgements.KEPT waiting events), and no I/O.
"""

from typing import Any

from messenger_realtime.exceptions import HubError
from messenger_realtime.hub.connection.methods import Cost, hub_method, length_of_first
from messenger_realtime.hub.connection.state import Connection

ACKNOWLEDGED = 256  # streams one call may name
LONGEST_WAIT_MS = 60_000  # the most `waited` may say
NOT_OFFSETS = (
    "Acknowledge takes an object of stream -> offset (a stream's name, a whole number >= 0)"
)
TOO_MANY = f"Acknowledge names at most {ACKNOWLEDGED} streams a call"
NOT_WAITED = (
    f"Acknowledge's second argument is the ms since the client had the first event it"
    f" acknowledges (a whole number from 0 to {LONGEST_WAIT_MS})"
)


@hub_method("Acknowledge", cost=Cost(call=1, per_items=64, items=length_of_first))
async def acknowledge(connection: Connection, offsets: Any, waited: Any) -> None:
    """The client holds each of these streams up to its offset, and had the first of the
    events they acknowledge `waited` ms ago (nothing to return)."""
    if not isinstance(offsets, dict):
        raise HubError(NOT_OFFSETS)
    if len(offsets) > ACKNOWLEDGED:
        raise HubError(TOO_MANY)
    for stream, offset in offsets.items():
        if not isinstance(stream, str) or type(offset) is not int or offset < 0:
            raise HubError(NOT_OFFSETS)
    if type(waited) is not int or not 0 <= waited <= LONGEST_WAIT_MS:
        raise HubError(NOT_WAITED)
    connection.acknowledging().acknowledged(offsets, waited / 1000)
