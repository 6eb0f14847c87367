"""The admin's Requeue and Quarantine: confirm, change in bounded batches, report, audit.

Any selection size works, up to "select all" over a filtered incident of any size: the
confirmation page carries the selection as Django's `select_across` plus the changelist's
filters (its URL), never one hidden input per row (a form over about a thousand fields is
refused by Django with a bare 400), and the change runs BATCH_SIZE rows per transaction
(outbox/operations.py). Every change leaves a LogEntry (Django's admin log): operator,
action, counts and the incident.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from messenger_realtime.outbox import operations
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry

Entries = QuerySet[RealtimeOutboxEntry]
SAMPLE_ROWS = 20  # rows listed on the confirmation page; the counts cover all of them


@dataclass(frozen=True)
class Action:
    verb: str  # "Requeue"
    done: str  # "requeued"
    eligible: Status
    change: Callable[..., int]  # operations.requeue / operations.quarantine


REQUEUE = Action("Requeue", "requeued", Status.QUARANTINED, operations.requeue)
QUARANTINE = Action("Quarantine", "quarantined", Status.PENDING, operations.quarantine)


def operator_of(request: HttpRequest) -> str:
    return str(request.user.get_username()) or "an operator"


def confirm_or_apply(
    modeladmin: Any, request: HttpRequest, queryset: Entries, action: Action
) -> TemplateResponse | None:
    """The confirmation page on the first POST; with post=yes, change and report."""
    if request.POST.get("post") != "yes":
        return _confirmation(modeladmin, request, queryset, action)
    selected = queryset.count()  # before the change: an incident selects Quarantined rows
    changed = action.change(_eligible_ids(queryset, action.eligible), operator=operator_of(request))
    left = selected - changed
    text = f"{action.done.capitalize()} {changed} of {selected} selected rows."
    if left:
        text += f" {left} not {action.eligible} (or changed meanwhile) were left alone."
    _audit(request, action, changed, selected)
    modeladmin.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)
    return None


def _eligible_ids(queryset: Entries, status: Status) -> Iterator[UUID]:
    """The selection's eligible ids, read a batch at a time (keyset on id), so memory
    stays bounded however large the selection; each batch is changed before the next
    is read."""
    rows = queryset.filter(status=status).order_by("id")
    last: UUID | None = None
    while True:
        page = rows.filter(id__gt=last) if last is not None else rows
        ids = list(page.values_list("id", flat=True)[: operations.BATCH_SIZE])
        yield from ids
        if len(ids) < operations.BATCH_SIZE:
            return
        last = ids[-1]


def _confirmation(
    modeladmin: Any, request: HttpRequest, queryset: Entries, action: Action
) -> TemplateResponse:
    by_status = dict(queryset.values_list("status").annotate(n=Count("id")).order_by())
    total = sum(by_status.values())
    eligible = queryset.filter(status=action.eligible)
    permanent = operations.permanent(eligible).count() if action is REQUEUE else 0
    select_across = request.POST.get("select_across") == "1"
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{action.verb} {total} realtime outbox entries?",
        "verb": action.verb,
        "eligible": action.eligible,
        "total": total,
        "eligible_count": by_status.get(action.eligible, 0),
        "left_alone": total - by_status.get(action.eligible, 0),
        "by_status": sorted(by_status.items()),
        "permanent": permanent,
        "permanent_codes": operations.PERMANENT_ERRORS,
        "incident": request.GET.get("incident"),
        "sample": list(queryset.order_by("id")[:SAMPLE_ROWS]),
        "select_across": select_across,
        # Under select_across the filters in the URL define the rows; Django still wants
        # one checkbox value to take the confirmed POST as an action.
        "selected": request.POST.getlist("_selected_action")[: modeladmin.list_per_page],
        "action": request.POST.get("action"),
        "opts": modeladmin.model._meta,
        "back": request.get_full_path(),  # the changelist with its filters
    }
    return TemplateResponse(request, "admin/messenger_realtime/confirm_action.html", context)


def _audit(request: HttpRequest, action: Action, changed: int, selected: int) -> None:
    """One admin-log entry per confirmed action (not per row): who, what, how many, which."""
    incident = request.GET.get("incident")
    shown = [(k, v) for k, v in request.GET.items() if k not in ("p", "o", "incident")]
    filters = "&".join(f"{k}={v}" for k, v in shown)
    message = f"{action.verb}: {changed} of {selected} selected rows {action.done}"
    if incident is not None:
        message += f"; incident {incident or '(none)'!r}"
    if filters:
        message += f"; filters {filters}"
    operator: Any = request.user  # signed in: the admin site lets no one else act
    LogEntry.objects.create(
        user_id=operator.pk,
        content_type=ContentType.objects.get_for_model(RealtimeOutboxEntry),
        object_id=None,
        object_repr=f"{action.verb} {changed} realtime outbox entries"[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def search_ids(term: str) -> UUID | None:
    """A search term that is an id (row, chat, user, message, reference), else None."""
    try:
        return UUID(term.strip())
    except ValueError:
        return None
