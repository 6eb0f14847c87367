"""The Prometheus alerting rules are valid, pass their promtool unit tests, and link the runbook."""

import re
from pathlib import Path

from tests.support.promtool import run_promtool
from tests.support.runtime import ROOT

RULES_DIR = Path("ops/prometheus")
RULES = RULES_DIR / "alerts.yml"
RULE_TESTS = RULES_DIR / "tests"
RUNBOOK = Path("docs/runbooks/realtime-dispatch.md")


def test_every_file_of_the_rules_folder_passes_promtool_check_rules() -> None:
    # What operators run: `promtool check rules ops/prometheus/*.yml` (the shell's glob).
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / RULES_DIR).glob("*.yml"))
    assert str(RULES) in files
    result = run_promtool("check", "rules", *files)
    assert result.returncode == 0, f"promtool check rules failed:\n{result.stdout}{result.stderr}"


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / RULE_TESTS).glob("*.yml"))
    assert tests, f"no promtool tests in {RULE_TESTS}"
    result = run_promtool("test", "rules", *tests)
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
