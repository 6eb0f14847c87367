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
