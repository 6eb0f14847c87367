"""Fixtures of the integration tier (real PostgreSQL and Redis, no worker process)."""

from tests.support.leaders import leaders  # noqa: F401  (the fixture, for the lease tests)
