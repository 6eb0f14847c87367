"""The README's `bash scripts/serve` on a fresh clone (no .venv, no node_modules): it
installs only what running needs, starts within a minute, the demo works in Chromium, and
Ctrl-C stops Daphne, the worker and the call reaper."""

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from playwright.sync_api import Browser, Page

from tests.support.api_client import http_get
from tests.support.browser import shot
from tests.support.runtime import ROOT, free_port, wait_until
from tests.support.workers import LoggedProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
FIRST_START_BUDGET = 60.0  # seconds, the bound for a first start on this machine
DEV_ONLY = ("pytest", "playwright", "mypy", "ruff", "matplotlib", "pgqueuer", "procrastinate")


def clean_copy(target: Path) -> None:
    """The files a clone of this tree has (tracked, or new and not ignored), as they are."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is not in a clone
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "clone"
    clean_copy(target)
    assert not (target / ".venv").exists() and not (target / "node_modules").exists()
    assert not (target / ".local").exists()
    return target


@pytest.fixture
def clone_database(django_db_setup: None) -> Iterator[str]:
    db = connection.settings_dict
    name = f"messenger_clone_{os.getpid()}"
    yield f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    admin = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def serve_env(database_url: str, port: int) -> dict[str, str]:
    """The caller's environment, minus this checkout's virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.update(
        DATABASE_URL=database_url,
        REDIS_URL=str(settings.REDIS_URL),
        PORT=str(port),
        MESSENGER_REALTIME_METRICS_PORT=str(free_port()),
    )
    return env


def sign_in(browser: Browser, base: str, name: str) -> Page:
    page = browser.new_context().new_page()
    page.goto(f"{base}/demo/")
    page.click(f"#sign-in button[value=demo-{name}]")
    page.wait_for_selector("#connection.connected", timeout=30_000)
    page.click("#chats li >> text=Demo team")
    page.wait_for_selector("#composer:not([hidden])")
    return page


def test_serve_on_a_fresh_clone_installs_the_runtime_only_and_serves_a_working_demo(
    clone: Path,
    clone_database: str,
    browser: Browser,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    serve = LoggedProcess(
        ["bash", "scripts/serve"],
        serve_env(clone_database, port),
        cwd=str(clone),
        start_new_session=True,
    )
    try:
        serve.wait_for("serving on", timeout=240)
        wait_until(lambda: http_get(f"{base}/demo/", timeout=2)[0] == 200, what="the demo")
        first_start = time.monotonic() - started
        assert http_get(f"{base}/static/vendor/signalr/signalr.min.js")[0] == 200
        installed = {p.name.lower() for p in (clone / ".venv" / "lib").glob("*/site-packages/*")}
        assert {"django", "daphne", "psycopg_pool"} <= installed
        assert [p for p in DEV_ONLY if p in installed] == []

        alice, bob = sign_in(browser, base, "alice"), sign_in(browser, base, "bob")
        alice.fill("#body", "hello from a fresh clone")
        alice.click("#send")
        bob.wait_for_selector("#messages li >> text=hello from a fresh clone")
        shot(bob, "fresh-clone-demo")
        assert first_start <= FIRST_START_BUDGET, f"first start took {first_start:.0f} s"

        os.killpg(serve.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert serve.wait(timeout=60) == 0
        assert http_get(f"{base}/demo/", timeout=2)[0] == 0
        with pytest.raises(ProcessLookupError):  # Daphne, the worker and the reaper too
            os.killpg(serve.proc.pid, 0)
    finally:
        if serve.proc.poll() is None:
            os.killpg(serve.proc.pid, signal.SIGKILL)
        serve.kill()
