"""The host's own messenger domain: users, chats, participants, messages.

The pluggable realtime app never imports these; it reads them through the domain port
(project/messenger/realtime_port.py).
"""

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models.functions import Greatest, Least, Now
from django.utils.crypto import salted_hmac

from messenger_realtime.uuid7 import uuid7


class User(AbstractUser):
    """A messenger user; the UUID is the JWT subject and the hub's user:{UserId}."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    display_name = models.CharField(max_length=100, blank=True)
    # Every credential issued before this is refused (tokens by `iat`, sessions by their
    # auth hash): set when the user is deactivated, changes their password or logs out
    # everywhere (services/revocation.py). The hub reads it through the domain port.
    credentials_revoked_at = models.DateTimeField(null=True, blank=True)
    # When the user was last online, saved lazily by the hub (never per connect).
    last_seen_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.display_name or self.username

    def get_session_auth_hash(self) -> str:
        """Django's (the password's HMAC), plus the revocation time: revoking ends every
        Django session of the user, as a password change does."""
        revoked = self.credentials_revoked_at
        return salted_hmac(
            "messenger.User.get_session_auth_hash",
            f"{self.password}|{revoked.isoformat() if revoked else ''}",
            algorithm="sha256",
        ).hexdigest()


class Chat(models.Model):
    class Kind(models.TextChoices):
        DIRECT = "Direct"
        GROUP = "Group"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.GROUP)
    title = models.CharField(max_length=200, blank=True)
    # The last Seq handed out; the row lock on the chat makes Seq gapless per chat.
    last_seq = models.BigIntegerField(default=0)
    # Bumped in the same transaction as every participant added or removed: the realtime
    # hub compares it with the version it read memberships at (DomainPort).
    membership_version = models.BigIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.title or f"{self.kind} chat {self.id}"


class Participant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="participants")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="participations")
    is_active = models.BooleanField(default=True)
    # Whether this member took part in the chat (created it, or sent a message in it):
    # only then does sharing the chat let the others see their presence. Anyone may open a
    # chat with anyone; being put in one is no consent (realtime_port.VISIBLE_USERS_SQL).
    took_part = models.BooleanField(default=False, db_default=False)
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
    # The sender's own id for the send (a UUID its client made): a retry with the same id
    # returns this message instead of posting a second one. Kept as long as the message.
    client_message_id = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat", "seq"], name="uq_message_chat_seq"),
            models.UniqueConstraint(
                fields=["sender", "client_message_id"],
                condition=models.Q(client_message_id__isnull=False),
                name="uq_message_sender_client_id",
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.seq} of {self.chat_id}"


class ChatEvent(models.Model):
    """The chat's system feed (membership and settings changes); ChatUpdated refers here."""

    class Kind(models.TextChoices):
        CREATED = "ChatCreated"
        PARTICIPANT_ADDED = "ParticipantAdded"
        PARTICIPANT_REMOVED = "ParticipantRemoved"
        TITLE_CHANGED = "TitleChanged"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    actor = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    subject_user = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.kind} in {self.chat_id}"


class Contact(models.Model):
    class Status(models.TextChoices):
        PENDING = "Pending"
        ACCEPTED = "Accepted"
        REMOVED = "Removed"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    requester = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    addressee = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    removed_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # One live contact or request per pair, whoever asked: concurrent requests
            # cannot both insert (the loser's INSERT fails; the use case answers 409).
            models.UniqueConstraint(
                Least("requester", "addressee"),
                Greatest("requester", "addressee"),
                condition=models.Q(status__in=["Pending", "Accepted"]),
                name="uq_contact_live_pair",
            )
        ]

    def __str__(self) -> str:
        return f"{self.requester_id} -> {self.addressee_id} ({self.status})"


class BlacklistEntry(models.Model):
    """owner blocks blocked_user; kept (inactive) after an unblock, for the event."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    blocked_user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "blocked_user"], name="uq_blacklist_pair")
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} blocks {self.blocked_user_id} ({self.is_active})"


class CallSession(models.Model):
    """A media session: a 1:1 call (Direct) or a chat's conference (Conference)."""

    class Kind(models.TextChoices):
        DIRECT = "Direct"
        CONFERENCE = "Conference"

    class Status(models.TextChoices):
        RINGING = "Ringing"
        ACTIVE = "Active"
        DECLINED = "Declined"
        MISSED = "Missed"
        CANCELLED = "Cancelled"
        ENDED = "Ended"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    session_kind = models.CharField(max_length=12, choices=Kind.choices)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="calls")
    room_name = models.CharField(max_length=100, unique=True)
    status = models.CharField(max_length=12, choices=Status.choices)
    initiator = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    callee = models.ForeignKey(User, null=True, on_delete=models.CASCADE, related_name="+")
    invited_user = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    ended_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    answered_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.session_kind} {self.room_name} ({self.status})"


class CallParticipant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    call = models.ForeignKey(CallSession, on_delete=models.CASCADE, related_name="participants")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    joined_at = models.DateTimeField(db_default=Now())
    left_at = models.DateTimeField(null=True, blank=True)
    screen_sharing = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.user_id} in {self.call_id}"


class Recording(models.Model):
    class Status(models.TextChoices):
        RECORDING = "Recording"
        STOPPED = "Stopped"
        AVAILABLE = "Available"
        FAILED = "Failed"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    call = models.ForeignKey(CallSession, on_delete=models.CASCADE, related_name="recordings")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RECORDING)
    started_by = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    file_url = models.URLField(blank=True)
    failure_code = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"recording {self.id} of {self.call_id} ({self.status})"
