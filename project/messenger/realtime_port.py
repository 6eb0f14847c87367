"""The host's implementation of the realtime app's DomainPort."""

from uuid import UUID

from messenger_realtime.port import DomainPort

from .models import Participant, User


class HostDomainPort(DomainPort):
    def active_chat_ids(self, user_id: UUID) -> list[UUID]:
        return list(
            Participant.objects.filter(user_id=user_id, is_active=True).values_list(
                "chat_id", flat=True
            )
        )

    def is_active_participant(self, chat_id: UUID, user_id: UUID) -> bool:
        return Participant.objects.filter(chat_id=chat_id, user_id=user_id, is_active=True).exists()

    def user_exists(self, user_id: UUID) -> bool:
        return User.objects.filter(id=user_id, is_active=True).exists()
