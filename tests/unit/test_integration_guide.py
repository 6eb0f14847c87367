"""docs/integration.md and docs/minimal-host/ say the same: every block of the guide
marked `<!-- minimal-host: PATH -->` appears, line for line, in that file of the host
(tests/e2e/test_second_host.py runs the host; this keeps the guide true to it)."""

import re

import pytest

from tests.support.runtime import ROOT

GUIDE = ROOT / "docs" / "integration.md"
HOST = ROOT / "docs" / "minimal-host"
MARKED = re.compile(r"<!-- minimal-host: (\S+) -->\n```\w*\n(.*?)\n```", re.S)


def marked_blocks() -> list[tuple[str, str]]:
    return MARKED.findall(GUIDE.read_text())


def test_the_guide_marks_a_block_of_each_file_it_teaches() -> None:
    files = {path for path, _ in marked_blocks()}
    assert {
        "chat/models.py",
        "chat/realtime.py",
        "chat/services.py",
        "chatsite/asgi.py",
        "chatsite/urls.py",
        "chatsite/settings/base.py",
        "chatsite/settings/realtime.py",
    } <= files


@pytest.mark.parametrize(("path", "block"), marked_blocks(), ids=lambda v: v[:40])
def test_each_marked_block_is_in_the_host_s_file(path: str, block: str) -> None:
    assert block in (HOST / path).read_text(), f"docs/integration.md's block for {path}"


def test_a_changed_block_is_noticed() -> None:
    path, block = marked_blocks()[0]
    assert block.replace("UUID", "Integer", 1) not in (HOST / path).read_text()
