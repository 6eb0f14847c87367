"""The Prometheus alerting rules are valid, pass their promtool unit tests, and link the runbook."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = Path("ops/prometheus/alerts.yml")
RULE_TESTS = Path("ops/prometheus/alerts_test.yml")
RUNBOOK = Path("docs/runbooks/realtime-dispatch.md")


def promtool() -> str:
    """promtool's path; a missing promtool fails the test (scripts/test installs it)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not on PATH: scripts/test installs it from the Debian package "
            "`prometheus` (apt-get install prometheus)",
            pytrace=False,
        )
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_alert_rules_pass_promtool_check() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, f"promtool check rules failed:\n{result.stdout}{result.stderr}"


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    result = run_promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, f"promtool test rules failed:\n{result.stdout}{result.stderr}"


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, - for spaces."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_runbook_url_points_at_a_runbook_section() -> None:
    rules = (ROOT / RULES).read_text()
    urls = re.findall(r"runbook_url:\s*(\S+)", rules)
    assert urls, "no runbook_url annotations in the rules"
    headings = re.findall(r"^#{1,6} (.+)$", (ROOT / RUNBOOK).read_text(), flags=re.MULTILINE)
    anchors = {heading_anchor(h) for h in headings}
    for url in urls:
        path, _, fragment = url.partition("#")
        assert path == str(RUNBOOK), url
        assert fragment in anchors, f"{url}: no heading with anchor #{fragment} in {RUNBOOK}"
