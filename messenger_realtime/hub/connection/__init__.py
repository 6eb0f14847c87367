"""One logical hub connection, composed of small parts.

`HubConnection` (lifecycle.py) holds the state every part reads, in one place, and its
life: the handshake, receiving, and ending once, whichever way: `end(Ending)`, with the
reason as data (ending.py). Each part owns one concern and its own
state, and is reached through the connection's attribute of the same name:

- `auth` (authentication.py): the credentials it came with and when they expire;
- `groups` (groups.py): the chats it holds (membership.py), its inbox, the joins;
- `outbound` (outbound.py): every write to the client, and the delivery of its inbox;
- `stateful` (stateful.py, replay.py): stateful reconnect, when granted: numbering both
  ways, the replay buffer, the resume;
- `timeouts` (timeouts.py): its deadlines, kept by the process's one clock (hub/clock.py).

What arrives from the channel layer (events.py) and from the client (invocations.py) is
handled by functions of the connection, not parts: they keep no state of their own.
What a part may read or call of its connection and of the other parts is declared once,
in state.py (`Connection`), which imports none of them: no import cycle.
Process-wide things (the clock, the fanout, admission, the registry) are its process's
(hub/process.py), which a connection is handed when it is made (`Process`, state.py).
"""

from messenger_realtime.hub.connection.lifecycle import FIRST_MESSAGE_WAIT, HubConnection

__all__ = ["FIRST_MESSAGE_WAIT", "HubConnection"]
