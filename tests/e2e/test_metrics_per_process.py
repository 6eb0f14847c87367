"""Real Daphne and a real worker each export only their own metric families, and the
alert rules, fed with what the two really export, fire only when they should."""

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.api_client import http_get
from tests.support.promtool import promtool
from tests.support.runtime import ROOT, free_port, wait_until
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow
WORKER_JOB, WEB_JOB = "messenger-realtime", "messenger-web"
# The dispatch families (not the hub's; channel overruns and the waits on the network are
# counted by both processes).
DISPATCH = re.compile(r"^messenger_realtime_(?!hub_|channel_overruns|network_)")


@pytest.fixture
def scrapes(worker_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(worker's /metrics, Daphne's /metrics) once the worker completed a pass."""
    port = free_port()
    worker = WorkerProcess(worker_env, polling_interval=0.2, metrics_port=port)
    daphne = DaphneProcess(worker_env)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_until(
            lambda: (
                "messenger_realtime_last_pass_timestamp_seconds 0.0" not in http_get(url)[1]
                and http_get(url)[0] == 200
            ),
            what="a completed pass",
        )
        http_get(f"{daphne.http}/health/live")  # one request, so request families exist
        yield http_get(url)[1], http_get(f"{daphne.http}/metrics")[1]
    finally:
        daphne.kill()
        worker.kill()


def family_names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def test_daphne_exports_no_worker_family_and_the_worker_no_web_family(
    scrapes: tuple[str, str],
) -> None:
    worker, web = (family_names(text) for text in scrapes)
    assert "messenger_realtime_last_pass_timestamp_seconds" in worker
    assert "messenger_realtime_pending" in worker
    assert {n for n in web if DISPATCH.match(n)} == set()
    assert "messenger_realtime_hub_connections" in web
    assert any(n.startswith("django_http_") for n in web)
    assert {n for n in worker if n.startswith(("django_", "messenger_realtime_hub_"))} == set()


def as_series(text: str, job: str, instance: str) -> list[dict[str, str]]:
    """Every sample of a scrape as a promtool input series held for 15 minutes; the
    worker's last-pass gauge follows promtool's clock, as a passing leader's does."""
    series = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created") or not sample.name.startswith(
                ("messenger_", "django_http_")
            ):
                continue
            labels = {**sample.labels, "job": job, "instance": instance}
            selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            passing = sample.name == "messenger_realtime_last_pass_timestamp_seconds"
            values = "0+60x15" if passing else f"{sample.value!r}x15"
            series.append({"series": f"{sample.name}{{{selector}}}", "values": values})
    return series


def firing(series: list[dict[str, str]], expected: list[str], tmp: Path) -> None:
    """Assert which alerts fire after 15 minutes of `series` (promtool, the real rules)."""
    test = {
        "rule_files": [str(ROOT / "ops" / "prometheus" / "alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'count by (alertname) (ALERTS{alertstate="firing"})',
                        "eval_time": "15m",
                        "exp_samples": [
                            {"labels": f'{{alertname="{name}"}}', "value": 1} for name in expected
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp / "scraped_test.yml"
    path.write_text(json.dumps(test))  # JSON is YAML
    result = subprocess.run(
        [promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_stay_silent_with_both_jobs_scraped_and_worker_down_fires_without_the_worker(
    scrapes: tuple[str, str], tmp_path: Path
) -> None:
    worker = as_series(scrapes[0], WORKER_JOB, "worker-1:9108")
    web = as_series(scrapes[1], WEB_JOB, "daphne-1:8000")
    assert worker and web
    firing(worker + web, [], tmp_path)
    firing(web, ["RealtimeDispatchWorkerDown"], tmp_path)


def test_in_single_process_mode_daphne_runs_the_dispatcher_and_exports_its_families(
    worker_env: dict[str, str],
) -> None:
    daphne = DaphneProcess(dict(worker_env, REALTIME_BACKPLANE_ENABLED="false"))
    try:
        daphne.wait_for("dispatcher running inside Daphne")
        names = family_names(http_get(f"{daphne.http}/metrics")[1])
        assert {
            "messenger_realtime_last_pass_timestamp_seconds",
            "messenger_realtime_pending",
        } <= names
        assert "messenger_realtime_hub_connections" in names
    finally:
        daphne.kill()
