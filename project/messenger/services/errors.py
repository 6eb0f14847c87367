"""Use-case refusals, named by what went wrong; the message is the reason shown to the caller.

They know nothing of HTTP: the REST layer (api/base.py) maps each class to a status.
"""


class DomainError(Exception):
    """A use case refused; catch this to handle every refusal alike."""


class InvalidInput(DomainError):
    """A value breaks a rule: a length, a range, a kind, an unknown user."""


class NotFound(DomainError):
    """Missing, or not visible to the caller (a non-participant learns nothing)."""


class Forbidden(DomainError):
    """The caller may see the thing but not do this to it."""


class Conflict(DomainError):
    """The thing's current state does not allow this (already done, not live)."""
