"""docs/integration.md and docs/minimal-host/ say the same: every block of the guide
marked `<!-- minimal-host: PATH -->` appears, line for line, in that file of the host
(tests/e2e/test_second_host.py runs the host; this keeps the guide true to it), its
import lines each among the file's, and every name a block uses that the file imports is
imported in the block too: a reader copying the guide never has to guess a module."""

import ast
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


def split(block: str) -> tuple[list[str], str]:
    """(the import statements the block opens with, the code after them). A block may be
    a fragment (a class's methods): only its leading imports are parsed."""
    lines, imports, at = block.split("\n"), [], 0
    while at < len(lines):
        if not lines[at].strip():
            at += 1
            continue
        if not lines[at].startswith(("from ", "import ")):
            break
        start = at
        if lines[at].endswith("("):
            while lines[at] != ")":
                at += 1
        imports.append("\n".join(lines[start : at + 1]))
        at += 1
    return imports, "\n".join(lines[at:]).strip("\n")


def imported_names(source: str) -> set[str]:
    """The names a module's import statements bind."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def sources_of(source: str) -> set[tuple[str, str]]:
    """(module, name) of every name a module's import statements bind."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found |= {(module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {(alias.name, "") for alias in node.names}
    return found


@pytest.mark.parametrize(("path", "block"), marked_blocks(), ids=lambda v: v[:40])
def test_each_marked_block_is_in_the_host_s_file(path: str, block: str) -> None:
    imports, body = split(block)
    assert body in (HOST / path).read_text(), f"docs/integration.md's block for {path}"
    shown = sources_of("\n".join(imports)) if imports else set()
    assert shown <= sources_of((HOST / path).read_text()), f"{path}'s block imports otherwise"


@pytest.mark.parametrize(("path", "block"), marked_blocks(), ids=lambda v: v[:40])
def test_each_block_imports_every_name_it_uses_that_its_file_imports(path: str, block: str) -> None:
    """Before: step 6 used `with_hub` without saying where it comes from."""
    imports, body = split(block)
    shown = imported_names("\n".join(imports)) if imports else set()
    used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", body))
    missing = (imported_names((HOST / path).read_text()) & used) - shown
    assert missing == set(), f"docs/integration.md's block for {path} does not import {missing}"


def test_a_changed_block_is_noticed() -> None:
    path, block = marked_blocks()[0]
    assert split(block)[1].replace("UUID", "Integer", 1) not in (HOST / path).read_text()
