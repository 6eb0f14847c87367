"""Fixtures of the integration tier (real PostgreSQL and Redis, no worker process).
`leaders`, for the lease tests, is registered in tests/conftest.py (pytest_plugins)."""
