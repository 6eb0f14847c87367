"""The benchmark keeps working: a seconds-long smoke (the figures come from full runs)."""

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.chaos import chaos_run
from tests.support.runtime import ROOT

pytestmark = pytest.mark.slow


def quick_run(script: str, env: dict[str, str]) -> dict[str, Any]:
    """A benchmark script's --quick run: its JSON, after checking it exited cleanly."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(proc.stdout[proc.stdout.index("{") :])
    return results


def test_bench_smoke_runs_every_scenario(worker_env: dict[str, str]) -> None:
    results = quick_run("run.py", worker_env)
    for name, runs in results["drain"].items():
        assert len(runs) == 1 and runs[0] > 0, name
    assert set(results["drain"]) == {
        "raw_sql",
        "spec_sql",
        "ours_noop",
        "pgqueuer",
        "procrastinate",
        "ours_layer",
        "rowwise_group_send",
        "pipelined_push_only",
    }
    assert results["idle_wake_layer_median_ms"] > 0
    (step,) = results["e2e"]["steps"]
    assert step["messages"] > 0 and step["lost"] == 0 and step["duplicated"] == 0
    assert step["deliveries"] == 2 * step["messages"]  # both members of each chat
    assert results["e2e"]["idle_wake_median_ms"] > 0
    # The report renders from these results (the full run writes it to docs/).
    sys.path.insert(0, str(ROOT / "bench"))
    import report

    page = report.markdown(results)
    assert "PgQueuer" in page and "| offered msg/s |" in page


def test_drain_cost_smoke_charges_each_drain_its_own_cpu(worker_env: dict[str, str]) -> None:
    results = quick_run("drain_cost.py", worker_env)
    runs = {run["drain"]: run for run in results["runs"]}
    assert set(runs) == {"spec_sql", "ours", "pgqueuer"} and results["rows"] == 2000
    for name, run in runs.items():
        assert run["rows_per_s"] > 0 and run["postgres_cpu_us_per_row"] > 0, name
        assert run["statements"], name  # pg_stat_statements of its own cluster
    # Ours names its claim among the statements, and how busy its claim session was.
    assert any("WITH RECURSIVE walk" in s["statement"] for s in runs["ours"]["statements"])
    assert 0 < runs["ours"]["claim_session_busy"] <= 1


def test_isolation_bench_smoke_delivers_every_event(worker_env: dict[str, str]) -> None:
    results = quick_run("isolation.py", worker_env)
    fairness, priority = results["fairness"], results["priority"]
    assert fairness["burst_received"] == fairness["burst"]
    assert fairness["quiet_received"] == fairness["quiet_sent"] > 0
    assert priority["received"] == priority["invites"]
    assert fairness["quiet_p95_ms"] > 0 and priority["invite_p95_ms"] > 0
    urgent = results["urgent"]
    assert urgent["flood_received"] == urgent["flood"]
    assert urgent["quiet_received"] == urgent["quiet_sent"] > 0


def test_hub_bench_smoke_delivers_every_event_to_every_member(worker_env: dict[str, str]) -> None:
    results = quick_run("hub_cpu.py", worker_env)
    for name in ("pairs", "group"):
        run = results[name]
        members = 2 if name == "pairs" else 20
        assert run["events"] > 0 and run["deliveries"] == members * run["events"], name
        assert run["lost"] == 0 and run["clients_closed"] == 0, name
        assert run["cpu_ms_per_delivery"]["daphne"] > 0, name


def test_one_user_smoke_measures_a_flood_of_a_method_and_of_the_http_sends(
    worker_env: dict[str, str],
) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "one_user.py"), "--quick"],
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout[: proc.stdout.index("| abuse")])
    assert [f["path"] for f in figures] == ["none (baseline)", "Typing", "LongPolling sends"]
    for row in figures:
        assert row["rest_p95_ms"] > 0 and row["bystander_failures"] == 0, row
    typing, sends = figures[1]["abuser"], figures[2]["abuser"]
    assert typing["closed"] >= 1  # its budget closed a flooding connection
    assert sends["posts"].get("200", 0) >= 1 and sends["records_per_post"] > 100


def test_chaos_smoke_loses_nothing_through_two_faults() -> None:
    """CI's one-minute soak: a Daphne killed (issue 31) and a Daphne's Redis connections
    gone silent (issue 43) under traffic; the 30-minute runs are in docs/reliability.md."""
    status, result, stderr = chaos_run(
        "--minutes", "1", "--clients", "40", "--seed", "31",
        "--faults", "daphne_kill,redis_silent_hub",
    )  # fmt: skip
    assert sum(result["faults_by_kind"].values()) == 2, stderr[-3000:]
    assert result["messages"] > 100 and result["deliveries"] > result["messages"]
    violations = {k: result[k] for k in ("lost", "silent", "foreign", "disorder")}
    # Each violation named (client, stream, offset, message) with the faults' times, in
    # full: pytest would cut the whole result short before them.
    named = json.dumps({"violations": result["violations"], "faults": result["faults"]})
    assert violations == {"lost": 0, "silent": 0, "foreign": 0, "disorder": 0}, named[:6000]
    assert result["drain"]["seconds"] is not None and result["drain"]["quarantined"] == 0
    assert status == 0


def test_chaos_self_test_catches_the_events_its_broken_worker_drops() -> None:
    """A checker that passes a run whose worker drops one message in a hundred is
    broken: the self-test must name the dropped messages, their chat and client."""
    status, result, stderr = chaos_run("--self-test", "--minutes", "0.75", "--clients", "30")
    assert status == 0, stderr[-3000:]
    lost = result["violations"]["lost"]
    assert result["lost"] > 0 and lost, result
    first = lost[0]
    assert first["kind"] == "MessageReceived" and first["message"]
    assert first["stream"].startswith("chat:") and first["client"].startswith("c")
