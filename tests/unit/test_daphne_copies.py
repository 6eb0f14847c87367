"""hub/daphne/server.py replaces four methods of Daphne's Server with versions derived from
Daphne 4.2.3's own (daphne/server.py; requirements.txt pins it): the application
factory, the application and timeout checkers, and protocol_disconnected. If an upgrade
changes any of those originals, the hub's versions must be derived again from the new
code before they are trusted: this fails until then, naming which."""

import ast
import hashlib
from pathlib import Path

import daphne
import daphne.server
import pytest

# sha256 (first 16 hex digits) of each original method's source, as copied from 4.2.3.
COPIED_FROM = {
    "create_application": "e440a9663047ea85",
    "application_checker": "1721c6d6833e7f86",
    "timeout_checker": "bbd457eb919a08be",
    "protocol_disconnected": "7c05736186760b40",
}


def original_sources() -> dict[str, str]:
    """Daphne's Server methods as its file has them (the class itself may be patched in
    this process already)."""
    source = Path(daphne.server.__file__).read_text()
    server = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Server"
    )
    return {
        node.name: ast.get_source_segment(source, node) or ""
        for node in server.body
        if isinstance(node, ast.FunctionDef)
    }


@pytest.mark.parametrize("method", sorted(COPIED_FROM))
def test_the_daphne_code_the_hub_replaces_is_what_it_was_derived_from(method: str) -> None:
    digest = hashlib.sha256(original_sources()[method].encode()).hexdigest()[:16]
    assert digest == COPIED_FROM[method], (
        f"daphne {daphne.__version__} changed Server.{method}: derive hub/daphne/server.py's "
        "version from the new code, then record its digest here"
    )
