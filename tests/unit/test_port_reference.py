"""The port's reference in the package (messenger_realtime/docs/port.md) is the code's:
every DomainPort method, every view and field, every event kind by its Python name.
Before: they were only in docs/minimal-host and the source, neither in the wheel."""

import dataclasses
import subprocess
import sys

from messenger_realtime.contracts import port, reference
from messenger_realtime.outbox.enums import RealtimeDispatchKind
from tests.support.runtime import ROOT

FILE = ROOT / "messenger_realtime" / "docs" / "port.md"


def test_the_reference_in_the_package_is_what_the_code_says() -> None:
    assert FILE.read_text() == reference.render(), (
        "messenger_realtime/docs/port.md is stale: run "
        "python -m messenger_realtime.contracts.reference > messenger_realtime/docs/port.md"
    )


def test_it_names_every_method_view_field_and_kind() -> None:
    text = FILE.read_text()
    methods = [
        name
        for name, value in vars(port.DomainPort).items()
        if not name.startswith("_") and callable(value) and not isinstance(value, classmethod)
    ]
    assert len(methods) >= 20  # the port as of 0.2.0; more only add rows
    assert [m for m in methods if f"`{m}(" not in text] == []
    for view in reference._VIEWS:
        assert f"### `{view.__name__}`" in text
        assert all(f"| `{f.name}` |" in text for f in dataclasses.fields(view))
    assert all(f"`RealtimeDispatchKind.{kind.name}`" in text for kind in RealtimeDispatchKind)


def test_the_module_writes_it_without_a_project() -> None:
    """A host regenerates or reads it from the wheel: no settings module needed."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "messenger_realtime.contracts.reference"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == FILE.read_text()
