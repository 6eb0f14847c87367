"""The worker's Django connection (its domain reads) ends a read that hangs at
BUILD_TIMEOUT on the server too, so an abandoned build thread gives its session back."""

import os
import subprocess
import sys

from django.conf import settings

from tests.support.runtime import ROOT

CODE = """
import django; django.setup()
from django.db import connection
from messenger_realtime.dispatch.connections import dedicate_django_connection
dedicate_django_connection(statement_timeout=1.5)
with connection.cursor() as cur:
    cur.execute("SHOW statement_timeout"); print(cur.fetchone()[0])
    cur.execute("SELECT current_setting('application_name')"); print(cur.fetchone()[0])
"""


def test_the_workers_domain_reads_time_out_at_build_timeout() -> None:
    db = settings.DATABASES["default"]  # the tests' server; its always-present database
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/postgres"
    out = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "project.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1500ms", "messenger-realtime-dispatch"]
