"""The realtime outbox: one push intent per row, written in the owner's transaction."""

from django.db import models
from django.db.models import Case, F, Q, When
from django.db.models.functions import Now

from messenger_realtime.outbox.enums import (
    URGENT_KINDS,
    RealtimeDispatchKind,
    RealtimeOutboxStatus,
    RealtimeTargetKind,
    SessionKind,
)
from messenger_realtime.uuid7 import uuid7


def _one_of(field: str, choices: type[models.TextChoices]) -> Q:
    return Q(**{f"{field}__in": choices.values})


class RealtimeOutboxEntry(models.Model):
    """messenger.realtime_outbox: typed reference ids and enums only, never a body or PII."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=32, choices=RealtimeDispatchKind.choices)
    target_kind = models.CharField(max_length=16, choices=RealtimeTargetKind.choices)
    chat_id = models.UUIDField(null=True, blank=True)
    target_user_id = models.UUIDField(null=True, blank=True)
    message_id = models.UUIDField(null=True, blank=True)  # logical ref to messenger.messages(id)
    ref_id = models.UUIDField(null=True, blank=True)
    session_kind = models.CharField(  # noqa: DJ001  (NULL = not a media push)
        max_length=12, choices=SessionKind.choices, null=True, blank=True
    )
    seq = models.BigIntegerField(null=True, blank=True)
    # The row's place in its target's stream (outbox/streams.py): 1, 2, 3, ... per
    # chat:{ChatId} or user:{UserId}, assigned at enqueue in the owner's transaction.
    # NULL only for rows written before streams existed (never recovered).
    stream_offset = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=16,
        choices=RealtimeOutboxStatus.choices,
        default=RealtimeOutboxStatus.PENDING,
        db_default=RealtimeOutboxStatus.PENDING,
    )
    attempts = models.IntegerField(default=0, db_default=0)
    # Scheduling uses the database clock: these default to now() in PostgreSQL.
    next_attempt_at = models.DateTimeField(db_default=Now())
    # NULL (not "") means "no error", as the spec's nullable LastError says.
    last_error = models.CharField(max_length=512, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    # Bumped by every claim and outcome: an outcome only applies to the claim it belongs to.
    row_version = models.BigIntegerField(default=0, db_default=0)
    # Set by a claim, cleared by its outcome: a due row that still has it was claimed and
    # never got an outcome (its worker died or hung on it), so it is retried alone.
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The hub group's id (the chat, or the user of a User push): fair claims take turns
    # between targets (dispatch/sql.py).
    target_key = models.GeneratedField(
        expression=Case(
            When(target_kind=RealtimeTargetKind.USER, then=F("target_user_id")),
            default=F("chat_id"),
        ),
        output_field=models.UUIDField(),
        db_persist=True,
    )

    class Meta:
        # Django quotes db_table as one identifier, so this spelling becomes
        # "messenger"."realtime_outbox": the table lives in the messenger schema.
        db_table = 'messenger"."realtime_outbox'
        verbose_name = "realtime outbox entry"
        verbose_name_plural = "realtime outbox entries"
        permissions = [
            ("requeue_realtimeoutboxentry", "Can requeue quarantined realtime outbox entries"),
            ("quarantine_realtimeoutboxentry", "Can quarantine pending realtime outbox entries"),
        ]
        indexes = [
            # The spec's due index, without the Done rows (migration 0011): they are most of
            # the table (a day's retention) and nothing reads them through it, so the Done
            # outcome adds no entry to it. Pending and Quarantined rows (QUARANTINED_STATS).
            models.Index(
                fields=["status", "next_attempt_at"],
                name="ix_rto_due",
                condition=Q(
                    status__in=[RealtimeOutboxStatus.PENDING, RealtimeOutboxStatus.QUARANTINED]
                ),
            ),
            models.Index(fields=["chat_id"], name="ix_rto_chat"),
            # The claim walks Pending rows in id order; Done and Quarantined rows stay out
            # of this index so the hot path does not wade through history.
            models.Index(
                fields=["id"],
                name="ix_rto_pending_id",
                condition=Q(status=RealtimeOutboxStatus.PENDING),
            ),
            # Fair claims visit the targets with Pending rows one by one, and take each
            # target's oldest rows (dispatch/sql.py CLAIM).
            models.Index(
                fields=["target_key", "id"],
                name="ix_rto_pending_target",
                condition=Q(status=RealtimeOutboxStatus.PENDING),
            ),
            # Time-critical kinds (invitations, call endings) are claimed ahead of a backlog.
            models.Index(
                fields=["id"],
                name="ix_rto_pending_urgent",
                condition=Q(status=RealtimeOutboxStatus.PENDING, kind__in=URGENT_KINDS),
            ),
            # Suspects: claimed, never given an outcome (a handful at most).
            models.Index(
                fields=["id"],
                name="ix_rto_pending_claimed",
                condition=Q(status=RealtimeOutboxStatus.PENDING, claimed_at__isnull=False),
            ),
            # Retention deletes old Done rows in bounded batches without a table scan.
            models.Index(
                fields=["updated_at"],
                name="ix_rto_done_updated",
                condition=Q(status=RealtimeOutboxStatus.DONE),
            ),
        ]
        constraints = [
            # Recovery reads "stream X after offset N" (hub/recovery.py) through this
            # index, from every row retention still keeps; unique, so no offset of a
            # stream is ever taken twice.
            models.UniqueConstraint(
                fields=["target_key", "target_kind", "stream_offset"],
                name="ux_rto_stream",
                condition=Q(stream_offset__isnull=False),
            ),
            models.CheckConstraint(
                condition=_one_of("kind", RealtimeDispatchKind), name="ck_rto_kind"
            ),
            models.CheckConstraint(
                condition=_one_of("target_kind", RealtimeTargetKind), name="ck_rto_target_kind"
            ),
            models.CheckConstraint(
                condition=_one_of("status", RealtimeOutboxStatus), name="ck_rto_status"
            ),
            models.CheckConstraint(
                condition=Q(session_kind__isnull=True) | _one_of("session_kind", SessionKind),
                name="ck_rto_session_kind",
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="ck_rto_attempts"),
            models.CheckConstraint(condition=Q(row_version__gte=0), name="ck_rto_row_version"),
            models.CheckConstraint(
                condition=(
                    Q(target_kind=RealtimeTargetKind.CHAT_GROUP, chat_id__isnull=False)
                    | Q(target_kind=RealtimeTargetKind.USER, target_user_id__isnull=False)
                ),
                name="ck_rto_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"
