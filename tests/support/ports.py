"""Domain ports that misbehave on one message, for isolation tests (worker subprocesses
name them in MESSENGER_REALTIME_DOMAIN_PORT; in-process tests pass them to Dispatcher),
and ports of hosts that implement less (optional capabilities, a forgotten read)."""

import os
import signal
import threading
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from messenger_realtime.contracts.port import DomainPort, Ids, MessageView
from project.messenger.realtime_port import HostDomainPort

POISON_ENV = "TEST_POISON_MESSAGE_ID"


class KillingPort(HostDomainPort):
    """SIGKILLs its own process when the read includes the poison message (a native crash
    or an OOM kill while building that row)."""

    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        if UUID(os.environ[POISON_ENV]) in set(ids):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().messages(ids)


class HangingPort(HostDomainPort):
    """Never returns (until `release` is set) when the read includes `poison`."""

    def __init__(self, poison: UUID) -> None:
        self.poison = poison
        self.release = threading.Event()
        self.stuck_reads = 0

    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        if self.poison in set(ids):
            self.stuck_reads += 1
            self.release.wait()
        return super().messages(ids)


class ChatsOnlyPort(HostDomainPort):
    """A host without contacts, blacklists, calls or recordings: it leaves DomainPort's
    optional reads as they are (HostDomainPort's own are set back to the defaults)."""

    contacts = DomainPort.contacts
    blacklist_entries = DomainPort.blacklist_entries
    calls = DomainPort.calls
    call_participants = DomainPort.call_participants
    recordings = DomainPort.recordings


class HalfPort(DomainPort):
    """A port that forgot an abstract read (messages)."""

    def active_chats(self, user_id: UUID) -> Mapping[UUID, int]:
        return {}

    def membership_versions(self, chat_ids: Ids) -> Mapping[UUID, int]:
        return {}

    def user_exists(self, user_id: UUID) -> bool:
        return True

    def participants(self, ids: Ids) -> Mapping[UUID, Any]:
        return {}

    def chat_events(self, ids: Ids) -> Mapping[UUID, Any]:
        return {}
