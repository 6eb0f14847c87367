"""The hub methods clients may invoke: one module of this package per method.

A method is an async function of the connection and the invocation's arguments,
registered under the name clients invoke it by with `@hub_method("Name", cost=Cost(...))`;
how many arguments an invocation must give is read from its signature. What it returns is
the Completion's result (or a `Billed` result: that and what the call turned out to cost
beyond its declared cost). To refuse a call with a reason the client sees, it raises a
`HubError` (exceptions.py; `HubException: <reason>` in the Completion); anything else it
raises is logged and answered as ASP.NET Core answers it, without a word of why.

What a call costs is declared here, with the method, and nowhere else: a `Cost` in
units, one unit being what a call that does next to nothing costs the process (parsing
it, a lookup, its Completion: ~a GetGroups). The connection charges every invocation its
cost in one place (invocations.py), before the method runs:
- to its own budget (INVOCATION_BUDGET units a second, INVOCATION_BURST at once; local,
  no round trip), every method and every call, so a method at line rate is a flood and
  the connection is closed (RATE_LIMIT_FLOOD refusals);
- and, for a method declared `shared` (it reads the database or Redis on the caller's
  behalf), to its user's invocation rate limit as well (RATE_LIMIT_INVOCATIONS a
  RATE_LIMIT_WINDOW, in Redis, across the user's connections and the hub processes).
There is no free method: `cost` is a required argument and at least one unit a call.

`discover()` imports every module here once (invocations.py, at import): a new method is
one module in this package and its tests, and nothing else changes.
"""

import importlib
import inspect
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

Method = Callable[..., Awaitable[Any]]  # (connection, *arguments) -> the result


def _no_items(arguments: list[Any]) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class Cost:
    """What one call of a method costs, in units (see the package's docstring)."""

    call: int = 1  # every call, whatever its arguments (at least 1)
    # One more unit per `per_items` of the items its arguments name (ids checked, streams
    # named), before it runs; `items` counts them from the raw arguments (any input).
    per_items: int = 0
    items: Callable[[list[Any]], int] = _no_items
    shared: bool = False  # also charged to the user's rate limit (Redis): it reads for them

    def __post_init__(self) -> None:
        if self.call < 1:
            raise ValueError("a hub method costs at least one unit a call")
        if self.per_items < 0:
            raise ValueError("per_items is a number of items (0: items cost nothing)")

    def units(self, arguments: list[Any]) -> int:
        """What a call with these arguments costs before it runs."""
        if not self.per_items:
            return self.call
        return self.call + self.items(arguments) // self.per_items


def length_of_first(arguments: list[Any]) -> int:
    """How many items the first argument names (a list or an object); 0 for anything
    else, which the method then refuses as malformed."""
    first = arguments[0] if arguments else None
    return len(first) if isinstance(first, list | dict) else 0


class Billed(NamedTuple):
    """A method's result and the units the call cost beyond its declared `Cost`, known
    only once it ran (a Recover's events and bytes sent): charged after the call, to the
    same budgets, never refused (the work is done; the next calls pay for it)."""

    result: Any
    units: int


class HubMethod(NamedTuple):
    name: str  # what clients invoke it by
    arity: int  # how many arguments an invocation must give
    call: Method
    cost: Cost


_REGISTERED: dict[str, HubMethod] = {}


def hub_method(name: str, *, cost: Cost) -> Callable[[Method], Method]:
    """Register `function` as the hub method clients invoke as `name`, at `cost`."""
    if not isinstance(cost, Cost):
        raise TypeError(f"hub method {name!r} declares no Cost")

    def register(function: Method) -> Method:
        if name in _REGISTERED:
            raise ValueError(f"hub method {name!r} is declared twice")
        arity = len(inspect.signature(function).parameters) - 1  # but the connection
        _REGISTERED[name] = HubMethod(name, arity, function, cost)
        return function

    return register


def discover() -> dict[str, HubMethod]:
    """Every hub method, by name: each module of this package imported (once)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(_REGISTERED)
