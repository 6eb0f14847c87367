"""Presence: whether a user is online (any of their devices connected, on any hub
process) and when they were last seen, for the users a client watches.

Never a PostgreSQL write per connect or heartbeat. It rides the places that count a
user's open connections (hub/user_connections.py: a sorted set per user in
RATE_LIMIT_REDIS_URL, taken at the connect's round trip, renewed by the process, lapsing
LEASE after a process dies): a user is online while a place of theirs holds. Those
scripts say when a user's first place is taken and their last given back; a sweep
(sweep.py) finds the users whose process died holding their only places, within LEASE
plus SWEEP_EVERY. Each such change is announced to the channel-layer group of the user's
watchers (changes.py): only the hub processes with a connection watching that user get
it, once each, and hand it to those connections. A user coming online notifies nobody
else. Last seen is written to Redis when a user goes offline and reaches the host's
database lazily, in batches (last_seen.py), if its port records it.

A client watches a bounded set of users it may see (the host's port decides:
DomainPort.visible_users) with the `WatchPresence` hub method, and gets their state, then
each change as a `presence` event.
"""
