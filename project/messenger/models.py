"""The host's own messenger domain: users, chats, participants, messages.

The pluggable realtime app never imports these; it reads them through the domain port
(project/messenger/realtime_port.py).
"""

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models.functions import Now

from messenger_realtime.uuid7 import uuid7


class User(AbstractUser):
    """A messenger user; the UUID is the JWT subject and the hub's user:{UserId}."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    display_name = models.CharField(max_length=100, blank=True)

    def __str__(self) -> str:
        return self.display_name or self.username


class Chat(models.Model):
    class Kind(models.TextChoices):
        DIRECT = "Direct"
        GROUP = "Group"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.GROUP)
    title = models.CharField(max_length=200, blank=True)
    # The last Seq handed out; the row lock on the chat makes Seq gapless per chat.
    last_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.title or f"{self.kind} chat {self.id}"


class Participant(models.Model):
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="participants")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="participations")
    is_active = models.BooleanField(default=True)
    last_read_seq = models.BigIntegerField(default=0)
    joined_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat", "user"], name="uq_participant_chat_user")
        ]
        indexes = [models.Index(fields=["user", "is_active"], name="ix_participant_user")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.chat_id}"


class Message(models.Model):
    class Kind(models.TextChoices):
        TEXT = "Text"
        FILE = "File"
        CARD = "Card"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    seq = models.BigIntegerField()
    sender = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.TEXT)
    body = models.TextField(blank=True)
    file_meta = models.JSONField(null=True, blank=True)
    card_text = models.TextField(blank=True)
    sent_at = models.DateTimeField(db_default=Now())
    edited_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chat", "seq"], name="uq_message_chat_seq")]

    def __str__(self) -> str:
        return f"message {self.seq} of {self.chat_id}"
