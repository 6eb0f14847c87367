"""The environment variables the docs name are the ones the code reads."""

import re

from messenger_realtime.conf.settings import DEFAULTS, env_name
from tests.support.runtime import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SETTINGS = (ROOT / "project" / "settings.py").read_text()


def test_every_messenger_realtime_variable_in_the_docs_is_one_the_settings_read() -> None:
    known = {env_name(key) for key in DEFAULTS}
    named = {
        m for doc in DOCS for m in re.findall(r"\bMESSENGER_REALTIME_[A-Z_]+\b", doc.read_text())
    }
    assert named and named - {"MESSENGER_REALTIME_"} <= known


def test_every_deployment_variable_in_operations_is_read_by_the_project_settings() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    named = set(re.findall(r"`((?:DJANGO|DATABASE)_[A-Z_]+|DEMO_ENABLED)`", text))
    assert len(named) > 10
    assert {n for n in named if f'"{n}"' not in SETTINGS} == set()


def test_operations_names_the_metrics_port_by_the_variable_that_sets_it() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "MESSENGER_REALTIME_METRICS_PORT" in text
    assert re.findall(r"(?<!MESSENGER_REALTIME_)\bMETRICS_PORT\b", text) == []
