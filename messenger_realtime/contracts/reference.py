"""The domain port's reference, written from the code: every DomainPort method (required
or optional, its signature and what it answers), every view and its fields, every event
kind by its Python name with the hub event it becomes and the port read it needs, and
outbox.enqueue's signature.

`python -m messenger_realtime.contracts.reference` prints it; the wheel carries the
result as messenger_realtime/docs/port.md, and tests/unit/test_port_reference.py fails
when the file and the code disagree. Run as a module it configures a bare Django of its
own (the outbox's enums live beside its model): no project is needed.
"""

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from messenger_realtime.contracts import port

_VIEWS = (
    port.MessageView,
    port.ParticipantView,
    port.ChatEventView,
    port.ContactView,
    port.BlacklistView,
    port.CallView,
    port.CallParticipantView,
    port.RecordingView,
    port.ChatRoster,
    port.UserStanding,
)


def _type(annotation: Any) -> str:
    """A type as its source spells it, without module paths (`|` escaped for a table)."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]+)", r"\1", text).replace("|", "\\|")


def _first_paragraph(thing: Any) -> str:
    doc = inspect.getdoc(thing) or ""
    if isinstance(thing, type) and doc.startswith(f"{thing.__name__}("):
        return ""  # a dataclass's generated docstring: its fields follow anyway
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def _signature(method: Callable[..., Any]) -> str:
    signature = inspect.signature(method)
    parameters = [p for name, p in signature.parameters.items() if name != "self"]
    arguments = ", ".join(f"{p.name}: {_type(p.annotation)}" for p in parameters)
    return f"{method.__name__}({arguments}) -> {_type(signature.return_annotation)}"


def _methods() -> list[str]:
    rows = ["| method | required | what it answers |", "| --- | --- | --- |"]
    for name, method in inspect.getmembers(port.DomainPort, inspect.isfunction):
        if name.startswith("_"):
            continue
        if name in port.DomainPort.__abstractmethods__:
            needed = "yes"
        elif name in port.DomainPort.OPTIONAL_READS:
            needed = "to write the kinds that read it"
        else:
            needed = "no (optional)"
        rows.append(f"| `{_signature(method)}` | {needed} | {_first_paragraph(method)} |")
    return rows


def _views() -> list[str]:
    lines: list[str] = []
    for view in _VIEWS:
        hints = typing.get_type_hints(view)
        lines += [
            f"### `{view.__name__}`",
            "",
            _first_paragraph(view),
            "",
            "| field | type | default |",
            "| --- | --- | --- |",
        ]
        for field in dataclasses.fields(view):
            default = (
                repr(field.default) if field.default is not dataclasses.MISSING else "required"
            )
            lines.append(f"| `{field.name}` | `{_type(hints[field.name])}` | {default} |")
        lines.append("")
    return lines


def _kinds() -> list[str]:
    from messenger_realtime.outbox.enums import READ_BY, RealtimeDispatchKind, event_name

    rows = [
        "| Python name | stored `kind` | hub event | port read |",
        "| --- | --- | --- | --- |",
    ]
    for kind in RealtimeDispatchKind:
        rows.append(
            f"| `RealtimeDispatchKind.{kind.name}` | `{kind.value}` | `{event_name(kind.value)}`"
            f" | `{READ_BY[kind.value]}` |"
        )
    return rows


def _choices(enum: Any) -> str:
    return ", ".join(f"`{enum.__name__}.{member.name}` (`{member.value}`)" for member in enum)


def _callable(name: str, thing: Any) -> list[str]:
    signature = re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]+)", r"\1", str(inspect.signature(thing)))
    return ["```python", f"{name}{signature}", "```", "", _first_paragraph(thing), ""]


def render() -> str:
    """The reference (Django set up: the outbox's enums live beside its model)."""
    from messenger_realtime.outbox import OutboxIntent, enqueue, enqueue_many
    from messenger_realtime.outbox.enums import RealtimeTargetKind, SessionKind

    lines = [
        "# The domain port: a reference",
        "",
        "<!-- Written by `python -m messenger_realtime.contracts.reference`; do not edit.",
        "     tests/unit/test_port_reference.py fails when this and the code disagree. -->",
        "",
        "What a host implements and writes (docs/integration.md, steps 4 and 5). Names are",
        "importable from `messenger_realtime.contracts.port` (the port and its views),",
        "`messenger_realtime.outbox.enums` (the kinds) and `messenger_realtime.outbox`",
        "(`enqueue`, `enqueue_many`, `OutboxIntent`).",
        "",
        "## `DomainPort`",
        "",
        _first_paragraph(port.DomainPort),
        "",
        *_methods(),
        "",
        "`Ids` is `Collection[UUID]`.",
        "",
        "## Views",
        "",
        *_views(),
        "## Event kinds",
        "",
        "A row's `kind` (`RealtimeDispatchKind`), the hub event clients receive for it, and",
        "the port method the worker reads its reference id through (a port without an optional",
        "read cannot write its kinds: `UnsupportedKind`).",
        "",
        *_kinds(),
        "",
        f"Targets: {_choices(RealtimeTargetKind)}. Session kinds: {_choices(SessionKind)}.",
        "",
        "## Writing rows (`messenger_realtime.outbox`)",
        "",
        *_callable("enqueue", enqueue),
        *_callable("enqueue_many", enqueue_many),
        *_callable("OutboxIntent", OutboxIntent),
    ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


if __name__ == "__main__":
    import django
    from django.conf import settings

    if not settings.configured:
        apps = ["django.contrib.contenttypes", "django.contrib.auth", "messenger_realtime"]
        settings.configure(INSTALLED_APPS=apps)
    django.setup()
    print(render(), end="")
