"""The host's own domain: users with UUID ids, chats, their members and messages."""

import uuid

from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    # messenger_realtime identifies users by UUID (docs/integration.md, step 2; E032).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)


class Chat(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    title = models.CharField(max_length=200)
    last_seq = models.BigIntegerField(default=0)
    # Raised in the transaction of every member added or removed (DomainPort contract).
    membership_version = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title


class Member(models.Model):
    """A user in a chat: the port's participant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(User, on_delete=models.CASCADE)
    is_active = models.BooleanField(default=True)
    last_read_seq = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chat", "user"], name="one_member")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.chat_id}"


class Message(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    seq = models.BigIntegerField()
    sender = models.ForeignKey(User, on_delete=models.SET_NULL, null=True)
    body = models.TextField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chat", "seq"], name="one_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} in {self.chat_id}"


class ChatEvent(models.Model):
    """What happened to a chat: created, a member added or removed."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE)
    kind = models.CharField(max_length=32)  # ChatCreated, ParticipantAdded, ...
    actor = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    subject = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.kind} in {self.chat_id}"
