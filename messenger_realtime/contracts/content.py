"""User content: what a user writes (a body, a card's text, a title, a file's metadata)
and the rule for a value that both hub protocols carry exactly, to every client.

The contracts carry user content opaquely: no encoder converts anything inside it
(hub/protocols/messagepack.py converts only the contracts' declared time fields), so it
reaches the JSON and the MessagePack clients of a chat exactly as it was stored. For that
to hold, a value must be plain JSON that every party reads alike: objects with string
keys, arrays, strings, booleans, null, finite numbers and integers within
±(2^53 - 1), which JavaScript and MessagePack both carry exactly (MessagePack refuses
integers past 64 bits, JavaScript rounds past 53).

Checked twice, with the same walk:
- at the REST boundary (the host's API) against ContentLimits, the hub's settings
  CONTENT_MAX_* (docs/api.md), refused with a 400 naming the field;
- at build, against WIRE_LIMITS (wider, so whatever the API accepted always passes),
  for rows written before the API checked, or by another writer: such a row is
  quarantined at once as UnencodablePayload, naming the field, and fails alone.

The walk is iterative: no nesting a client can send makes it recurse.
"""

import math
from dataclasses import dataclass
from typing import Any

from messenger_realtime.conf.settings import HubOptions

MAX_SAFE_INTEGER = 2**53 - 1  # Number.MAX_SAFE_INTEGER
KEY_SHOWN = 40  # characters of a key an error names


@dataclass(frozen=True, slots=True)
class ContentLimits:
    """Bounds on one user-content value.

    max_depth: levels of objects and arrays (a flat object is 1); max_entries: keys per
    object and items per array; max_key_length and max_string: characters.
    """

    max_depth: int
    max_entries: int
    max_key_length: int
    max_string: int


def api_limits(options: HubOptions) -> ContentLimits:
    """The limits the REST API checks user content against (the CONTENT_MAX_* settings)."""
    return ContentLimits(
        max_depth=options.content_max_depth,
        max_entries=options.content_max_entries,
        max_key_length=options.content_max_key_length,
        max_string=options.content_max_string,
    )


# What the build accepts from the database: well inside MessagePack's own nesting limit
# (511 levels when packing) and JSON parsers' (about 1,000), so an accepted payload always
# encodes; the entry and length bounds only stop absurd rows from reaching the layer.
WIRE_LIMITS = ContentLimits(
    max_depth=32, max_entries=10_000, max_key_length=1_000, max_string=1_000_000
)


class Unreadable:
    """What a DomainPort returns for a stored value it could not read (JSON nested past
    Python's recursion limit, written before the API bounded nesting): the build then
    quarantines that row alone, as UnencodablePayload naming the field, where an
    exception would have failed the read of its whole batch."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class ContentError(ValueError):
    """A value that breaks the rule; str() names the field and the problem."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


def check(value: Any, field: str, limits: ContentLimits) -> None:
    """Raise ContentError (naming the field, e.g. `fileMeta.size` or `fileMeta.tags[2]`)
    unless `value` is plain JSON within `limits` that both protocols carry exactly."""
    # (value, its path, its depth); a container counts one level for itself. A path is
    # the field, or (parent path, key or index): named only when something is refused.
    stack: list[tuple[Any, Any, int]] = [(value, field, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if len(item) > limits.max_string:
                raise ContentError(_name(path), f"is longer than {limits.max_string} characters")
            if not item.isascii() and not _is_utf8(item):
                raise ContentError(_name(path), "holds an unpaired surrogate character")
        elif item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                raise ContentError(
                    _name(path), f"is out of range (integers within ±{MAX_SAFE_INTEGER})"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ContentError(_name(path), "is not a finite number (no NaN or Infinity)")
        elif isinstance(item, dict | list):
            if depth >= limits.max_depth:
                raise _too_deep(path, limits.max_depth)
            if len(item) > limits.max_entries:
                noun = "keys" if isinstance(item, dict) else "items"
                raise ContentError(_name(path), f"has more than {limits.max_entries} {noun}")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ContentError(_name(path), "has a key that is not a string")
                    if len(key) > limits.max_key_length:
                        raise ContentError(
                            _name(path), f"has a key longer than {limits.max_key_length} characters"
                        )
                    stack.append((child, (path, key), depth + 1))
            else:
                stack.extend((child, (path, i), depth + 1) for i, child in enumerate(item))
        elif isinstance(item, Unreadable):
            raise ContentError(_name(path), f"could not be read ({item.why})")
        else:
            raise ContentError(_name(path), f"is a {type(item).__name__}, not a JSON value")


def _too_deep(path: Any, max_depth: int) -> ContentError:
    """Nesting is the whole field's fault: name the field the caller checked, or (when
    it checked a whole body or payload) the top-level field, with its own bound."""
    steps = []
    while isinstance(path, tuple):
        path, step = path
        steps.append(step)
    if path or not steps:
        return ContentError(path or "the value", f"is nested deeper than {max_depth} levels")
    return ContentError(_name(("", steps[-1])), f"is nested deeper than {max_depth - 1} levels")


def _name(path: Any) -> str:
    """`fileMeta.tags[2].name` from a path of nested (parent, key or index) pairs."""
    parts: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        # A key is the user's text: only its start, so an error stays a pointer.
        parts.append(f"[{step}]" if isinstance(step, int) else f".{step[:KEY_SHOWN]}")
    return (path + "".join(reversed(parts))).lstrip(".") or "the value"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
