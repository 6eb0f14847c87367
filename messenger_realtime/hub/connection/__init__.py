"""One logical hub connection, composed of small parts.

`HubConnection` (lifecycle.py) owns the connection's own fields and alone writes them
(its transport, protocol, handshaken/closing/ended, its StreamMarks), and its life: the
handshake, receiving, and ending once, whichever way: `end(Ending)`, with the reason as
data (ending.py). Each part owns one concern and its own state outright, and is reached
through the connection's attribute of the same name:

- `auth` (authentication.py): the credentials it came with and when they expire;
- `groups` (groups.py): the chats it holds (membership.py), its inbox, the joins;
- `outbound` (outbound.py): every write to the client, when it last wrote, and the
  delivery of its inbox;
- `stateful` (stateful.py, replay.py): stateful reconnect, when granted: numbering both
  ways, the replay buffer, the resume;
- `timeouts` (timeouts.py): the times its deadlines count from (its opening, when the
  client was last heard) and the rule that says what fell due; the connection itself is
  what the process's one clock (hub/clock.py) calls (`fire`, `wake_at`);
- `invocations` (invocations.py): what its client invokes, what it may still spend (its
  budget, budget.py: every message pays its declared cost) and how many messages were
  refused;
- `composing` (composing.py): its user's typing indicators: when it last published in
  each chat, and who blocked its user (read at most once a minute).

A part never writes its connection: HubConnection hands each, when it makes it, the other
parts it uses and, if it needs anything of the connection (the transport carrying it
now, whether it is closing, how to end it, ...), the connection itself as one read-only
reference typed by the `Owner` Protocol of the part's own module, which lists exactly
what it reads and calls (mypy checks HubConnection against it): one reference per part,
not a callable per need (an idle connection's memory: issue 48). What arrives from the
channel layer (layer_messages.py) and the hub methods (methods/) are functions the connection is
passed to; they keep no state of their own. What they use of it is declared in state.py
(`Connection`), which imports none of them: no import cycle. Process-wide things (the
clock, the fanout, admission, the registry) are its process's (hub/process.py), which a
connection is handed when it is made (`Process`, state.py).
"""

from messenger_realtime.hub.connection.lifecycle import FIRST_MESSAGE_WAIT, HubConnection

__all__ = ["FIRST_MESSAGE_WAIT", "HubConnection"]
