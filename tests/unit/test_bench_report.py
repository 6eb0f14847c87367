"""The generated block of docs/performance.md (bench/report.py): a new run replaces it,
and the run it replaced is kept first in the page's history, once."""

import json
import sys
from pathlib import Path

from tests.support.runtime import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import report

OLD = """Run of 2026-01-01 10:00 UTC on 2 cores, an older run.

![throughput and latency](performance.png)

### Drain throughput

| scenario | rows/s |
| --- | --- |
| ours | 1 |"""


def page(tmp_path: Path) -> Path:
    path = tmp_path / "performance.md"
    path.write_text(
        f"# Performance\n\n{report.BEGIN}\n{OLD}\n{report.END}\n\n## Sections\n\n"
        f"## Earlier runs of the generated block (history)\n\n{report.HISTORY}\n"
        "### The run of 2025-12-31\n\nolder still\n"
    )
    return path


def test_a_new_run_takes_the_block_and_the_replaced_one_heads_the_history(
    tmp_path: Path,
) -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    path = page(tmp_path)
    report.write(results, path)
    text = path.read_text()
    block = text[text.index(report.BEGIN) : text.index(report.END)]
    assert report.markdown(results) in block and "an older run" not in block
    history = text[text.index(report.HISTORY) :]
    assert history.index("### The run of 2026-01-01") < history.index("### The run of 2025-12-31")
    assert "#### Drain throughput" in history and "![" not in history
    report.write(results, path)  # the same run rendered again: kept once
    assert path.read_text() == text


def test_the_knee_is_judged_against_both_targets() -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    step = results["e2e"]["steps"][0]

    def rows(slo_met_up_to: int) -> tuple[str, str]:
        """The spec SLO's row (≥ 2,000) and issue 49's (≥ 1,500), p95 < 1 s up to a rate."""
        results["e2e"]["steps"] = [
            {
                **step,
                "offered_rate": rate,
                "lost": 0,
                "p95_ms": 50.0 if rate <= slo_met_up_to else 5e3,
            }
            for rate in (1000, 1500, 2000)
        ]
        lines = report.e2e_targets(results)
        (spec,) = [line for line in lines if "(spec SLO)" in line]
        (issue,) = [line for line in lines if "issue 49's knee" in line]
        return spec, issue

    spec, issue = rows(1500)
    assert spec.endswith("| 1,500 msg/s | **missed** |") and issue.endswith("| 1,500 msg/s | met |")
    spec, issue = rows(2000)
    assert spec.endswith("| 2,000 msg/s | met |") and issue.endswith("| 2,000 msg/s | met |")
    spec, issue = rows(1000)
    assert issue.endswith("| 1,000 msg/s | **missed** |")
