"""Use-case refusals; the REST layer maps them to 4xx responses with the reason."""


class DomainError(Exception):
    status = 400


class NotFound(DomainError):
    """Missing, or not visible to the caller (a non-participant learns nothing)."""

    status = 404


class Forbidden(DomainError):
    status = 403


class Conflict(DomainError):
    status = 409
