"""Uninstalling (docs/integration.md, "Uninstalling"): `migrate messenger_realtime zero`
on a database of its own leaves nothing of the app: no table, index, function or schema
of its, no migration row, no support group. Before: the `messenger` schema stayed."""

import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.support.runtime import manage

APP_OBJECTS = """
SELECT
  (SELECT count(*) FROM pg_namespace WHERE nspname = 'messenger'),
  (SELECT count(*) FROM pg_class WHERE relname LIKE 'realtime%%'
     OR relname LIKE 'messenger_realtime%%'),
  (SELECT count(*) FROM django_migrations WHERE app = 'messenger_realtime'),
  (SELECT count(*) FROM auth_group WHERE name ILIKE '%%realtime%%')
"""


def admin() -> psycopg.Connection[Any]:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True
    )


@pytest.fixture
def database() -> Iterator[str]:
    name = f"uninstall_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrating_the_app_to_zero_leaves_nothing_of_it(database: str) -> None:
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{database}",
    }
    for args in (("migrate", "--no-input"), ("migrate", "messenger_realtime", "zero")):
        done = subprocess.run(manage(*args), env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=database
    ) as conn:
        schema, relations, migrations, groups = conn.execute(APP_OBJECTS).fetchone() or ()
    assert (schema, relations, migrations, groups) == (0, 0, 0, 0)
