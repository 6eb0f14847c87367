"""The Grafana dashboard (ops/grafana/): every panel's PromQL parses (promtool), every
metric family is shown, and each is read from the job that exports it."""

import json
import re
from pathlib import Path
from typing import Any

from messenger_realtime.ops import exposition, metrics
from tests.support.promtool import run_promtool
from tests.support.runtime import ROOT

DASHBOARD = ROOT / "ops" / "grafana" / "messenger-realtime.json"
# What the dashboard must show (issue 14): backlog, lag, outcomes by kind, overruns,
# connections, claim and build times.
SPEC_FAMILIES = {
    "messenger_realtime_pending",
    "messenger_realtime_oldest_pending_age_seconds",
    "messenger_realtime_lag_seconds",
    "messenger_realtime_dispatched",
    "messenger_realtime_retried",
    "messenger_realtime_quarantined",
    "messenger_realtime_last_pass_timestamp_seconds",
    "messenger_realtime_channel_overruns",
    "messenger_realtime_hub_connections",
    "messenger_realtime_hub_disconnects",
    "messenger_realtime_claim_duration_seconds",
    "messenger_realtime_build_duration_seconds",
}
# Grafana's built-in interval variables, as Grafana would expand them.
BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}


def panels(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in rows."""
    found = []
    for panel in node.get("panels", []):
        found.append(panel)
        found.extend(panels(panel))
    return found


def expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL with the dashboard's variables expanded) for every target."""
    board = json.loads(DASHBOARD.read_text())
    values = {v["name"]: v.get("current", {}).get("value", "") for v in board["templating"]["list"]}
    values.update(BUILTINS)

    def expand(expr: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)

    return [
        (panel["title"], expand(target["expr"]))
        for panel in panels(board)
        for target in panel.get("targets", [])
    ]


def test_every_panel_query_parses_as_promql(tmp_path: Path) -> None:
    queries = expressions()
    assert len(queries) >= 10
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{n}", "expr": expr}
                    for n, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_specs_metrics_are_on_the_dashboard_each_read_from_the_job_that_exports_it() -> None:
    text = "\n".join(expr for _, expr in expressions())
    web = {d.name for family in metrics.WEB_FAMILIES for d in family.describe()}
    worker = exposition.worker_family_names() | exposition.shared_family_names()
    shown = set(re.findall(r"\b(messenger_realtime_\w+?)(?:_total|_bucket|_count|_sum)?\{", text))
    assert shown >= SPEC_FAMILIES, SPEC_FAMILIES - shown
    assert shown <= worker | web, shown - worker - web  # no family the code does not have
    shared = exposition.shared_family_names()
    for name in shown:
        uses = re.findall(rf"\b{name}\w*\{{([^}}]*)\}}", text)
        jobs = ["messenger-web"] if name in web else ["messenger-realtime"]
        if name in shared:  # both processes count their share: read from both jobs
            jobs = ["messenger-realtime", "messenger-web"]
        assert [j for j in jobs if any(f'job="{j}"' in u for u in uses)] == jobs, (name, uses)
        assert all(any(f'job="{j}"' in u for j in jobs) for u in uses), (name, uses)
