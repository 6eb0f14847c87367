"""One authenticated user cannot hurt anyone else (issue 44), against a real Daphne: every
argument a client sends that the hub cannot take is a HubException naming the problem,
never an unexpected error with a traceback in the log."""

import json
from collections.abc import Iterator

import pytest

from tests.support.factories import UserFactory
from tests.support.wire import RS, joined, records
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


@pytest.mark.parametrize("offset", [2**63, 2**70, 10**30])
def test_a_recover_offset_past_any_stream_is_a_hub_exception_naming_it(
    daphne: DaphneProcess, offset: int
) -> None:
    user = UserFactory()
    stream = f"user:{user.id}"
    with joined(daphne, user) as ws:
        call = {
            "type": 1,
            "invocationId": "7",
            "target": "Recover",
            "arguments": [{stream: offset}],
        }
        ws.send(json.dumps(call) + RS)
        (completion,) = records(ws)
    assert completion["invocationId"] == "7"
    assert completion["error"] == (
        "Failed to invoke 'Recover' due to an error on the server. HubException: "
        f"The offset of {stream!r} must be an integer from 0 to {2**63 - 1}."
    )
    assert not any("Traceback" in line for line in daphne.lines)
