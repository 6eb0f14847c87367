"""The call reaper as a process of its own: on its schedule it marks overdue rings Missed,
beats its heartbeat file, and stops cleanly on SIGTERM."""

import signal
from pathlib import Path

import pytest

from project.messenger import services
from project.messenger.models import CallSession
from tests.support.factories import UserFactory
from tests.support.runtime import manage, wait_until
from tests.support.workers import LoggedProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


def test_reaper_marks_an_overdue_ring_missed_on_its_schedule_and_stops_on_sigterm(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    call = services.start_call(alice.id, chat.id)
    beat = tmp_path / "reaper.alive"
    argv = manage("reap_calls", "--every", "0.2", "--timeout", "1", "--heartbeat", str(beat))
    reaper = LoggedProcess(argv, worker_env)
    try:
        reaper.wait_for("call reaper running")
        wait_until(lambda: beat.exists(), what="a heartbeat")
        wait_until(
            lambda: CallSession.objects.get(id=call.id).status == CallSession.Status.MISSED,
            what="the ring to time out",
        )
        reaper.wait_for("missed calls .*missed=1")
        reaper.signal(signal.SIGTERM)
        assert reaper.wait() == 0
        reaper.wait_for("call reaper stopped")
    finally:
        reaper.kill()
