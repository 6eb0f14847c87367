"""Support's view of the outbox: read-only rows with triage columns, incidents grouped by
error fingerprint, and the Requeue / Quarantine actions (each behind its own permission,
confirmed first, audited; admin_actions.py)."""

from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin import ShowFacets
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from messenger_realtime.admin_actions import QUARANTINE, REQUEUE, confirm_or_apply, search_ids
from messenger_realtime.outbox import operations
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry

Entries = QuerySet[RealtimeOutboxEntry]
PERMS = {
    "view": "messenger_realtime.view_realtimeoutboxentry",
    "requeue": "messenger_realtime.requeue_realtimeoutboxentry",
    "quarantine": "messenger_realtime.quarantine_realtimeoutboxentry",
}


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


def facets_shown(request: HttpRequest, model_admin: Any) -> bool:
    """Whether Django appends its own count to every filter choice on this page."""
    shown: ShowFacets = model_admin.show_facets
    return shown is ShowFacets.ALWAYS or (shown is ShowFacets.ALLOW and "_facets" in request.GET)


class IncidentFilter(admin.SimpleListFilter):
    """Quarantined rows by last_error fingerprint: pick one, select all, requeue."""

    title = "quarantine incident"
    parameter_name = "incident"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # With facets on, Django appends the (filtered) count itself: one count, not two.
        counted = not facets_shown(request, model_admin)
        return [
            (i.fingerprint, f"{i.fingerprint or '(none)'}" + (f" ({i.rows})" if counted else ""))
            for i in operations.incidents(limit=50)
        ]

    def queryset(self, request: HttpRequest, queryset: Entries) -> Entries:
        if self.value() is None:
            return queryset
        rows = operations.with_fingerprint(queryset.filter(status=Status.QUARANTINED))
        return rows.filter(fingerprint=self.value())  # type: ignore[misc]


def _short(value: Any) -> SafeString | str:
    """An id's first 8 characters, the whole id on hover (keeps the row on screen)."""
    if value is None:
        return "-"
    return format_html('<span class="rto-id" title="{}">{}</span>', value, str(value)[:8])


def _seconds(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


@admin.action(
    permissions=["requeue"], description="Requeue (Quarantined → Pending, attempts 0, due now)"
)
def requeue(
    modeladmin: "RealtimeOutboxEntryAdmin", request: HttpRequest, queryset: Entries
) -> TemplateResponse | None:
    """Requeue the selected Quarantined rows, once confirmed."""
    return confirm_or_apply(modeladmin, request, queryset, REQUEUE)


@admin.action(permissions=["quarantine"], description="Quarantine (Pending → Quarantined)")
def quarantine(
    modeladmin: "RealtimeOutboxEntryAdmin", request: HttpRequest, queryset: Entries
) -> TemplateResponse | None:
    """Set the selected Pending rows aside, once confirmed."""
    return confirm_or_apply(modeladmin, request, queryset, QUARANTINE)


@admin.register(RealtimeOutboxEntry)
class RealtimeOutboxEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "created",
        "kind",
        "status",
        "attempts",
        "last_error",
        "next_attempt",
        "target_kind",
        "chat_or_user",
        "message",
        "seq",
    )
    list_display_links = ("created",)
    list_filter = ("status", IncidentFilter, "kind", "target_kind", AgeFilter)
    search_fields = ("kind", "last_error")
    search_help_text = (
        "Any id (row, chat, user, message, reference), a kind, or error text. Times are UTC."
    )
    ordering = ("-id",)
    actions = [requeue, quarantine]
    list_per_page = 100

    class Media:
        css = {"all": ["messenger_realtime/outbox-admin.css"]}

    @admin.display(description="created", ordering="created_at")
    def created(self, row: RealtimeOutboxEntry) -> str:
        return _seconds(row.created_at)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, row: RealtimeOutboxEntry) -> str:
        return _seconds(row.next_attempt_at)

    @admin.display(description="chat or user")
    def chat_or_user(self, row: RealtimeOutboxEntry) -> SafeString | str:
        return _short(row.chat_id if row.chat_id is not None else row.target_user_id)

    @admin.display(description="message")
    def message(self, row: RealtimeOutboxEntry) -> SafeString | str:
        return _short(row.message_id if row.message_id is not None else row.ref_id)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> Any:
        # Without the app sidebar the triage columns fit beside the filters at 1280 px.
        context = {"is_nav_sidebar_enabled": False, **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows come from owners' transactions only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # quarantine, never drop

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only: state changes go through the actions

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Acting on rows implies seeing them: "requeue" alone is enough to use the page.
        return any(request.user.has_perm(perm) for perm in PERMS.values())

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PERMS["requeue"])

    def has_quarantine_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PERMS["quarantine"])

    def get_search_results(
        self, request: HttpRequest, queryset: Entries, search_term: str
    ) -> tuple[Entries, bool]:
        value = search_ids(search_term)
        if value is None:
            return super().get_search_results(request, queryset, search_term)
        match = Q(id=value) | Q(chat_id=value) | Q(target_user_id=value)
        return queryset.filter(match | Q(message_id=value) | Q(ref_id=value)), False
