"""Support's view of the outbox: read-only rows, incidents grouped by error fingerprint,
and the Requeue / Quarantine actions (each behind its own permission, confirmed first)."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.template.response import TemplateResponse

from messenger_realtime.outbox import operations as services
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry

Entries = QuerySet[RealtimeOutboxEntry]


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"
    AGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1h", "Last hour"), ("24h", "Last 24 hours"), ("older", "Older than 24 hours")]

    def queryset(self, request: HttpRequest, queryset: Entries) -> Entries:
        if self.value() in self.AGES:
            return queryset.filter(created_at__gte=Now() - self.AGES[str(self.value())])
        if self.value() == "older":
            return queryset.filter(created_at__lt=Now() - self.AGES["24h"])
        return queryset


class IncidentFilter(admin.SimpleListFilter):
    """Quarantined rows by last_error fingerprint: pick one, select all, requeue."""

    title = "quarantine incident"
    parameter_name = "incident"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (i.fingerprint, f"{i.fingerprint or '(none)'} ({i.rows})")
            for i in services.incidents(limit=50)
        ]

    def queryset(self, request: HttpRequest, queryset: Entries) -> Entries:
        if self.value() is None:
            return queryset
        rows = services.with_fingerprint(queryset.filter(status=Status.QUARANTINED))
        return rows.filter(fingerprint=self.value())  # type: ignore[misc]


def _confirm_then_apply(
    modeladmin: "RealtimeOutboxEntryAdmin",
    request: HttpRequest,
    queryset: Entries,
    verb: str,
    eligible: Status,
    change: Callable[[list[UUID]], int],
) -> TemplateResponse | None:
    """Confirmation page on the first POST; on post=yes, `change` the eligible rows and report."""
    rows = list(queryset.order_by("id"))
    if request.POST.get("post") != "yes":
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": f"{verb} {len(rows)} realtime outbox entries?",
            "verb": verb,
            "eligible": eligible,
            "rows": rows,
            "ineligible": [r for r in rows if r.status != eligible],
            "action": request.POST.get("action"),
            "opts": modeladmin.model._meta,
        }
        return TemplateResponse(request, "admin/messenger_realtime/confirm_action.html", context)
    changed = change([r.id for r in rows if r.status == eligible])
    left = len(rows) - changed
    text = f"{verb}d {changed} of {len(rows)} selected rows."
    if left:
        text += f" {left} not {eligible} (or changed meanwhile) were left alone."
    modeladmin.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)
    return None


@admin.action(
    permissions=["requeue"], description="Requeue (Quarantined → Pending, attempts 0, due now)"
)
def requeue(
    modeladmin: "RealtimeOutboxEntryAdmin", request: HttpRequest, queryset: Entries
) -> TemplateResponse | None:
    """Requeue the selected Quarantined rows, once confirmed."""
    return _confirm_then_apply(
        modeladmin, request, queryset, "Requeue", Status.QUARANTINED, services.requeue
    )


@admin.action(permissions=["quarantine"], description="Quarantine (Pending → Quarantined)")
def quarantine(
    modeladmin: "RealtimeOutboxEntryAdmin", request: HttpRequest, queryset: Entries
) -> TemplateResponse | None:
    """Set the selected Pending rows aside, once confirmed."""
    return _confirm_then_apply(
        modeladmin, request, queryset, "Quarantine", Status.PENDING, services.quarantine
    )


@admin.register(RealtimeOutboxEntry)
class RealtimeOutboxEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id",
        "kind",
        "target_kind",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
        "last_error",
    )
    list_filter = ("status", IncidentFilter, "kind", "target_kind", AgeFilter)
    search_fields = ("kind", "last_error")
    search_help_text = "Any id (row, chat, user, message, reference), a kind, or error text."
    ordering = ("-id",)
    actions = [requeue, quarantine]
    list_per_page = 100

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows come from owners' transactions only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # quarantine, never drop

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only: state changes go through the actions

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messenger_realtime.requeue_realtimeoutboxentry")

    def has_quarantine_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("messenger_realtime.quarantine_realtimeoutboxentry")

    def get_search_results(
        self, request: HttpRequest, queryset: Entries, search_term: str
    ) -> tuple[Entries, bool]:
        try:
            value = UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        match = Q(id=value) | Q(chat_id=value) | Q(target_user_id=value)
        return queryset.filter(match | Q(message_id=value) | Q(ref_id=value)), False
