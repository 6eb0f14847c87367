"""`scripts/serve --hubs 2` for real: two Daphne processes behind Debian's nginx (its
generated config), the worker and the reaper, on the test database. Official clients
spread over both processes all get their chat events; SIGKILL one process and its
clients reconnect through nginx to the other and, after a REST resync, lack nothing,
while the other process's clients kept receiving; serve starts the dead process again
(capacity returns) and Ctrl-C stops every process it started. SSE and long-polling
connections keep every request on their process (nginx hashes `id`); a bad hub count is
refused; the config generated for other counts and hosts passes `nginx -t`."""

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from project.messenger import services
from tests.support.api_client import Api, http_get
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import ROOT, listen_backlog, somaxconn, wait_until
from tests.support.served import HUBS, Reader, Served, connect_on


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("transactional_db")
def test_clients_over_two_hub_processes_survive_one_being_killed_and_serve_restarts_it(
    served: Served,
) -> None:
    alice = UserFactory(name="alice")
    users = [UserFactory(name=f"reader{n}") for n in range(24)]
    chat = services.create_chat(alice.id, [u.id for u in users])
    sender = Api(served.url, token_for(alice.id))
    posted: list[dict[str, Any]] = []

    def post(count: int) -> None:
        for _ in range(count):
            body = {"body": f"message {len(posted) + 1}"}
            status, message = sender.call("POST", f"/api/chats/{chat.id}/messages", body)
            if status == 502:
                # Sent on nginx's idle connection to the process just killed, before nginx
                # saw it close: nginx does not retry a POST it passed on (it might have
                # committed); the client does. The REST history below shows no duplicate.
                status, message = sender.call("POST", f"/api/chats/{chat.id}/messages", body)
            assert status == 201, (status, message)
            posted.append(message)

    def ids(messages: list[dict[str, Any]]) -> set[str]:
        return {m["messageId"] for m in messages}

    readers: list[Reader] = []
    try:
        # At least four clients, at least two in each process (nginx hashes each
        # connection's id, so where the next one lands is chance: connect until spread).
        while len(readers) < 4 or min(sum(r.hub == i for r in readers) for i in (1, 2)) < 2:
            assert len(readers) < 14, [r.hub for r in readers]
            connect_on(served, users, readers)
        assert [served.connections(i) for i in (1, 2)] == [
            sum(r.hub == i for r in readers) for i in (1, 2)
        ]
        post(3)
        for reader in readers:
            wait_until(lambda r=reader: r.received() >= ids(posted), what="the first three")

        # SIGKILL hub 1: no Close; its clients see the connection drop.
        victims = [r for r in readers if r.hub == 1]
        others = [r for r in readers if r.hub == 2]
        killed = served.hub_pid(1)
        os.kill(killed, signal.SIGKILL)
        before_kill = posted[-1]["seq"]
        post(3)  # while hub 1's clients are away
        for victim in victims:
            victim.client.next("state", "reconnecting", timeout=30)
            victim.client.next("state", "reconnected", timeout=30)
        # All of them now in hub 2, through nginx (serve restarts hub 1 only after a pause).
        wait_until(lambda: served.connections(2) == len(readers), what="every client in hub 2")
        post(3)
        everything = ids(posted)
        for reader in readers:
            wait_until(lambda r=reader: r.received() >= ids(posted[-3:]), what="the last three")
        for other in others:  # kept receiving all along: no reconnect, nothing missed
            assert other.states() == ["connected"]
            assert other.received() == everything
        for victim in victims:  # resync over REST (list-messages) after the reconnect
            path = f"/api/chats/{chat.id}/messages?afterSeq={before_kill}&limit=200"
            history = victim.api.ok("GET", path)["messages"]
            assert ids(history) == ids(posted[3:])
            assert victim.received() | ids(history) == everything

        # serve started hub 1 again: new connections reach it through nginx.
        served.process.wait_for(rf"hub 1 \(pid {killed}\) exited with status 137", timeout=10)
        wait_until(lambda: served.hub_pid(1) != killed, what="hub 1 started again")
        served.listening(1, times=2)
        wait_until(lambda: served.ready(1), what="hub 1 ready again")
        while not any(r.hub == 1 for r in readers[len(victims) + len(others) :]):
            assert users, "no new connection reached the restarted hub 1"
            connect_on(served, users, readers)
        post(1)
        for reader in readers:
            wait_until(lambda r=reader: posted[-1]["messageId"] in r.received(), what="the last")

        # Ctrl-C (SIGINT to the process group, as a terminal sends it) stops everything.
        os.killpg(served.process.proc.pid, signal.SIGINT)
        assert served.process.wait(timeout=60) == 0
        with pytest.raises(ProcessLookupError):  # nginx, both hubs, the worker, the reaper
            os.killpg(served.process.proc.pid, 0)
        assert http_get(f"{served.url}/health/live", timeout=2)[0] == 0
    finally:
        for reader in readers:
            reader.client.kill()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.usefixtures("transactional_db")
def test_event_streams_and_long_polls_stay_on_their_process_through_serves_nginx(
    served: Served,
) -> None:
    """Every request of an SSE or long-polling connection must reach the process that
    holds it (a poll elsewhere is a 404 and the connection fails): nginx's hash of `id`."""
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    readers = []
    try:
        for transport in ("ServerSentEvents", "LongPolling", "LongPolling"):
            readers.append(Reader(served, bob, transport=transport))
        wait_until(lambda: sum(served.connections(i) or 0 for i in (1, 2)) == 3, what="3")
        sender = Api(served.url, token_for(alice.id))
        sent = set()
        for n in range(5):  # each delivery ends a poll: five more polls per LongPolling
            body = {"body": f"message {n}"}
            sent.add(sender.ok("POST", f"/api/chats/{chat.id}/messages", body)["messageId"])
            for reader in readers:
                wait_until(lambda r=reader: r.received() >= sent, what=f"message {n}")
        for reader in readers:  # an invocation: a POST (SSE, polling) with the same id
            assert reader.client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
            assert reader.states() == ["connected"]
    finally:
        for reader in readers:
            reader.client.kill()


@pytest.mark.parametrize("hubs", ["0", "-1", "two", "1.5", ""])
def test_serve_refuses_a_hub_count_that_is_not_a_positive_integer(
    hubs: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        ["bash", "scripts/serve", "--hubs", hubs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, MESSENGER_LOCAL_DIR=str(tmp_path)),
    )
    assert done.returncode == 2  # before installing or starting anything
    assert f"--hubs needs a whole number from 1 to 999 (Daphne processes), not '{hubs}'" in (
        done.stderr
    )


def test_serve_refuses_several_hubs_without_the_redis_backplane(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "scripts/serve", "--hubs=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, MESSENGER_LOCAL_DIR=str(tmp_path), REALTIME_BACKPLANE_ENABLED="false"),
    )
    assert done.returncode == 2
    assert "--hubs 2 needs the Redis backplane" in done.stderr


def test_the_generated_nginx_config_for_three_hubs_on_ipv6_is_valid_for_nginx(
    tmp_path: Path,
) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    config = tmp_path / "nginx"
    script = (
        "source scripts/lib.sh && source scripts/hubs.sh && hubs=3 port=18000 host=::1 && "
        'write_nginx_config "$1" && "$2" -q -t -e "$1/error.log" -p "$1" -c "$1/nginx.conf"'
    )
    done = subprocess.run(
        ["bash", "-c", script, "-", str(config), nginx],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, MESSENGER_LOCAL_DIR=str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    text = (config / "nginx.conf").read_text()
    servers = re.findall(r"^\s+server (127\.0\.0\.1:\d+) ", text, re.M)
    assert servers == ["127.0.0.1:18001", "127.0.0.1:18002", "127.0.0.1:18003"]
    assert "listen [::1]:18000 backlog=4096;" in text and "daemon off;" in text
    assert f"pid {config}/nginx.pid;" in text


@pytest.mark.parametrize(
    ("previous", "age", "pause"),
    [
        (0, 3, 1),  # the first death: 1 s
        (1, 3, 2),  # died again within 10 s of its restart: twice as long
        (4, 9, 8),
        (16, 0, 30),  # never above 30 s
        (30, 2, 30),
        (8, 10, 1),  # ran 10 s or more: back to 1 s
        (0, 500, 1),
    ],
)
def test_a_hub_that_keeps_dying_young_is_restarted_ever_more_slowly(
    previous: int, age: int, pause: int, tmp_path: Path
) -> None:
    script = 'source scripts/lib.sh && source scripts/hubs.sh && restart_pause "$1" "$2"'
    done = subprocess.run(
        ["bash", "-c", script, "-", str(previous), str(age)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, MESSENGER_LOCAL_DIR=str(tmp_path)),
    )
    assert (done.returncode, done.stdout) == (0, f"{pause}\n"), done.stderr


@pytest.mark.slow
def test_serves_nginx_and_hub_processes_listen_with_a_backlog_a_storm_fits_in(
    served: Served,
) -> None:
    """A reconnect storm's connections wait in the kernel's queues (nginx's default is
    511, Twisted's 50): nginx's and every hub process's listening socket take 4096, as
    far as the kernel allows."""
    expected = min(4096, somaxconn())
    assert listen_backlog(served.port) == expected  # nginx
    assert [listen_backlog(served.port + i) for i in range(1, HUBS + 1)] == [expected] * HUBS
