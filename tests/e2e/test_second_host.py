"""A second host, built only from docs/integration.md (docs/minimal-host/), installs the
app's wheel into a virtualenv of its own (this checkout nowhere on its path) and follows
the guide's steps for real: check, migrate, owner transactions writing outbox rows,
`dispatch_realtime`, Daphne serving /hubs/messenger, the official @microsoft/signalr
client receiving each event and recovering after Daphne is killed and restarted, support
requeueing a quarantined row in the admin in Chromium, health and metrics answering, and
no token in any log line."""

import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from playwright.sync_api import Browser

from tests.support.api_client import http_get
from tests.support.browser import shot
from tests.support.hub_clients import HubClient
from tests.support.packaging import build_wheel, venv_with
from tests.support.runtime import ROOT, free_port, wait_until
from tests.support.workers import LoggedProcess

pytestmark = pytest.mark.slow
HOST = ROOT / "docs" / "minimal-host"
PASSWORD = "support-passphrase-42"


class SecondHost:
    """docs/minimal-host copied out of the checkout, on a database of its own, run with
    the virtualenv's python, daphne and manage.py as the guide says."""

    def __init__(self, tmp: Path) -> None:
        self.bin = venv_with(build_wheel(tmp / "wheel"), tmp / "venv", "psycopg[binary]")
        self.dir = Path(
            shutil.copytree(HOST, tmp / "host", ignore=shutil.ignore_patterns("__pycache__"))
        )
        db = settings.DATABASES["default"]
        self.server = {k: str(db[k.upper()]) for k in ("host", "port", "user")}
        self.database = f"chatsite_{uuid.uuid4().hex[:12]}"
        with self.admin_connection() as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # Daphne's access log is stdout: every line, now
            "PYTHONPATH": str(self.dir),  # the host alone: nothing of the checkout
            "CHATSITE_SECRET_KEY": uuid.uuid4().hex * 2,
            "CHATSITE_JWT_SIGNING_KEY": uuid.uuid4().hex * 2,
            "CHATSITE_DB_NAME": self.database,
            "CHATSITE_DB_HOST": self.server["host"],
            "CHATSITE_DB_PORT": self.server["port"],
            "CHATSITE_DB_USER": self.server["user"],
            "CHATSITE_REDIS_URL": settings.REDIS_URL,
            "MESSENGER_REALTIME_METRICS_PORT": str(free_port()),
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
        }
        self.port = free_port()
        self.processes: list[LoggedProcess] = []

    def admin_connection(self) -> psycopg.Connection[Any]:
        s = self.server
        return psycopg.connect(
            host=s["host"], port=s["port"], user=s["user"], dbname="postgres", autocommit=True
        )

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / "python"), "manage.py", *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def chat(self, *args: str) -> dict[str, str]:
        return dict(json.loads(self.manage("chat", *args)))

    def start(self, *argv: str) -> LoggedProcess:
        process = LoggedProcess(list(argv), self.env, cwd=str(self.dir))
        self.processes.append(process)
        return process

    def worker(self) -> LoggedProcess:
        return self.start(str(self.bin / "python"), "manage.py", "dispatch_realtime")

    def daphne(self) -> LoggedProcess:
        argv = [str(self.bin / "daphne"), "-b", "127.0.0.1", "-p", str(self.port)]
        daphne = self.start(*argv, "chatsite.asgi:application")
        daphne.wait_for("Listening on TCP address", timeout=30)
        return daphne

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lines(self) -> list[str]:
        return [line for p in self.processes for line in p.lines]

    def close(self) -> None:
        for process in self.processes:
            process.kill()
        with self.admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


@pytest.fixture
def host(tmp_path: Path) -> Iterator[SecondHost]:
    second = SecondHost(tmp_path)
    yield second
    second.close()


def requeue_in_the_admin(browser: Browser, host: SecondHost, entry: str) -> None:
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    changelist = "/admin/messenger_realtime/realtimeoutboxentry/"
    page.goto(f"{host.url}/admin/login/?next={changelist}")
    page.fill("#id_username", "support")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    page.check(f"input[name=_selected_action][value='{entry}']")
    page.select_option("select[name=action]", "requeue")
    page.click("button[name=index]")
    page.wait_for_selector("#confirm-action")
    shot(page, "second-host-confirm-requeue")
    page.click("#confirm")
    page.wait_for_selector(".messagelist")
    assert "Requeued 1 of 1 selected rows." in page.inner_text(".messagelist")


def test_a_host_built_from_the_guide_delivers_recovers_and_requeues(
    host: SecondHost, browser: Browser
) -> None:
    # The app comes from the wheel in the host's own virtualenv.
    where = subprocess.run(
        [
            str(host.bin / "python"),
            "-c",
            "import messenger_realtime; print(messenger_realtime.__file__)",
        ],
        cwd=host.dir,
        env=host.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(host.bin.parent)) and not where.startswith(str(ROOT) + "/messenger")

    # Steps 7 and 8: check (no media secret: this host has no calls), migrate, run.
    assert "System check identified no issues" in host.manage("check")
    host.manage("migrate", "--noinput")
    host.manage("createsuperuser", "--noinput", "--username", "support", "--email", "s@example.org")
    users = host.chat("users", "alice", "bob")
    chat = host.chat("create", "Team", users["alice"], users["bob"])["chat"]
    worker = host.worker()
    daphne = host.daphne()

    # Step 9: a first event on the official client.
    token = host.manage("realtime_token", users["bob"]).strip()
    client = HubClient("@microsoft/signalr", f"{host.url}/hubs/messenger", token, dict(os.environ))
    try:
        client.next("state", "connected", timeout=30)
        host.chat("say", chat, users["alice"], "hello")
        first = client.message()
        assert (first["body"], first["chatId"], first["seq"]) == ("hello", chat, 1)
        stream, offset = first["stream"], first["offset"]

        # Daphne killed: the client reconnects to the restarted one and recovers.
        daphne.signal(signal.SIGKILL)
        daphne.wait()
        client.next("state", "reconnecting", timeout=30)
        host.chat("say", chat, users["alice"], "while away")
        daphne = host.daphne()
        client.next("state", "reconnected", timeout=60)
        assert client.recover({stream: offset}) == {stream: "recovered"}
        # The recovered events come ahead of Recover's result.
        bodies = [e["payload"].get("body") for e in client.stream_events(stream)]
        assert bodies[-2:] == ["hello", "while away"]

        # Step 10: a quarantined row requeued by support in the admin, then delivered.
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        entry = host.chat("say", chat, users["alice"], "requeued")["entry"]
        host.manage("realtime_outbox", "quarantine", "--ids", entry)
        worker = host.worker()
        requeue_in_the_admin(browser, host, entry)
        assert client.message()["body"] == "requeued"

        # A browser's HTTP transports carry the token in the query: Daphne logs the path.
        assert http_get(f"{host.url}/hubs/messenger?id=gone&access_token={token}")[0] == 404
        daphne.wait_for(r'"GET /hubs/messenger\?id=\[redacted\]&access_token=\[redacted\]"')

        # Health and metrics: Daphne's through the include(), the worker's on its port.
        assert http_get(f"{host.url}/health/ready")[0] == 200
        status, metrics = http_get(f"{host.url}/metrics")
        assert status == 200 and "messenger_realtime_hub_connections" in metrics
        worker_port = host.env["MESSENGER_REALTIME_METRICS_PORT"]
        wait_until(lambda: http_get(f"http://127.0.0.1:{worker_port}/health/ready")[0] == 200)
    finally:
        client.kill()

    # The worker's lines reach stderr under the host's default logging, and no token
    # (the access token in the WebSocket's query) reaches any line.
    assert any("messenger_realtime.dispatch" in line for line in worker.lines), worker.lines
    leaked = [line for line in host.lines() if token in line]
    assert leaked == []
