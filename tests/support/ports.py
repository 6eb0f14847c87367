"""Domain ports that misbehave on one message, for isolation tests (worker subprocesses
name them in MESSENGER_REALTIME_DOMAIN_PORT; in-process tests pass them to Dispatcher)."""

import os
import signal
import threading
from collections.abc import Mapping
from uuid import UUID

from messenger_realtime.contracts.port import Ids, MessageView
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
