"""The hub methods clients may invoke: one module of this package per method.

A method is an async function of the connection and the invocation's arguments,
registered under the name clients invoke it by with `@hub_method("Name")`; how many
arguments an invocation must give is read from its signature. What it returns is the
Completion's result. To refuse a call with a reason the client sees, it raises a
`HubError` (exceptions.py; `HubException: <reason>` in the Completion); anything else it
raises is logged and answered as ASP.NET Core answers it, without a word of why.

Every invocation is charged to the user's invocation rate limit (hub/ratelimit.py, one
Redis round trip, and RATE_LIMIT_FLOOD refusals close the connection), unless its method
is declared `charged=False`: one a client may call at keystroke rate (Typing), whose
every call is cheap and local (a dict lookup or two) and which bounds what it does beyond
that itself. That is declared here, once per method, never decided by the dispatcher.

`discover()` imports every module here once (invocations.py, at import): a new method is
one module in this package and its tests, and nothing else changes.
"""

import importlib
import inspect
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

Method = Callable[..., Awaitable[Any]]  # (connection, *arguments) -> the result


class HubMethod(NamedTuple):
    name: str  # what clients invoke it by
    arity: int  # how many arguments an invocation must give
    call: Method
    # Charged to the user's invocation rate limit (Redis) before it runs; False: the
    # method bounds its own cost (see the package's docstring).
    charged: bool = True


_REGISTERED: dict[str, HubMethod] = {}


def hub_method(name: str, *, charged: bool = True) -> Callable[[Method], Method]:
    """Register `function` as the hub method clients invoke as `name`; `charged=False`
    for one that bounds its own cost instead of the invocation rate limit."""

    def register(function: Method) -> Method:
        if name in _REGISTERED:
            raise ValueError(f"hub method {name!r} is declared twice")
        arity = len(inspect.signature(function).parameters) - 1  # but the connection
        _REGISTERED[name] = HubMethod(name, arity, function, charged)
        return function

    return register


def discover() -> dict[str, HubMethod]:
    """Every hub method, by name: each module of this package imported (once)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(_REGISTERED)
