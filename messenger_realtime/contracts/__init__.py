"""Typed RealtimeMessage contracts, one per RealtimeDispatchKind, built at delivery.

port.py: what the app reads from the host's domain (DomainPort and its views);
events.py: OutgoingEvent, HubTarget and the row shape contracts read;
chat.py, people.py, media.py: the payload builders; build.py: build_events();
content.py: the rule for user content both hub protocols carry exactly.
"""
