"""The domain port: everything the realtime app reads from the host's messenger domain.

The app never imports the host's models. The host implements DomainPort and names the
class in settings.MESSENGER_REALTIME["DOMAIN_PORT"]. Methods are synchronous (they run in
a worker thread via sync_to_async) and must be cheap: they sit on the hub's hot paths.
"""

import abc
from functools import cache
from uuid import UUID

from django.utils.module_loading import import_string


class DomainPort(abc.ABC):
    @abc.abstractmethod
    def active_chat_ids(self, user_id: UUID) -> list[UUID]:
        """Chats in which the user is an active participant (their hub chat groups)."""

    @abc.abstractmethod
    def is_active_participant(self, chat_id: UUID, user_id: UUID) -> bool:
        """Whether the user may receive the chat's events right now."""

    @abc.abstractmethod
    def user_exists(self, user_id: UUID) -> bool:
        """Whether a token's subject is a known, active user."""


@cache
def get_domain_port() -> DomainPort:
    """The configured port (one instance per process)."""
    from .conf import load_hub_options

    port: DomainPort = import_string(load_hub_options().domain_port)()
    return port
