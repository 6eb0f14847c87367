# ruff: noqa: RUF001  (the generated page uses typographic signs: times, en dash)
"""Turn a benchmark run (bench/results.json) into the table and plot of docs/performance.md.

The generated part of the page sits between two markers; the prose around it (the
profile, the explanation of each miss) is written by hand and kept.
"""

import re
import statistics
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
# Where the runs a new block replaces are kept, newest first (the page's history).
HISTORY = "<!-- bench:history -->"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float]) -> str:
    """The median, and the range when there were repeats."""
    if len(values) < 2:
        return f"{median(values):,.0f}"
    return f"{median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def status(ok: bool) -> str:
    return "met" if ok else "**missed**"


def drain_table(r: dict[str, Any]) -> list[str]:
    d = {name: median(runs) for name, runs in r["drain"].items()}
    raw, noop, layer = d["raw_sql"], d["ours_noop"], d["ours_layer"]
    pgq, proc, rowwise = d["pgqueuer"], d["procrastinate"], d["rowwise_group_send"]
    push_only = d["pipelined_push_only"]
    runs = r["drain"]
    lines = [
        "| scenario | rows/s, median (range) | ratio | target | status |",
        "| --- | --- | --- | --- | --- |",
        f"| raw SQL ceiling: claim {r['batch_size']} (SKIP LOCKED) + mark Done, one loop "
        f"| {spread(runs['raw_sql'])} | 1.00× | reference | — |",
        "| the same loop with the spec's claim (also moves the indexed next_attempt_at, "
        f"updated_at) | {spread(runs['spec_sql'])} | {d['spec_sql'] / raw:.2f}× | reference "
        "| — |",
        f"| our dispatcher, no-op publisher | {spread(runs['ours_noop'])} "
        f"| {noop / raw:.2f}× ceiling | ≥ 0.8× ceiling | {status(noop >= 0.8 * raw)} |",
        f"| PgQueuer {r['peers']['pgqueuer_version']}, no-op entrypoint "
        f"({r['peers']['pgqueuer_settings']}) | {spread(runs['pgqueuer'])} "
        f"| ours {noop / pgq:.2f}× | ours ≥ 3× | {status(noop >= 3 * pgq)} |",
        f"| Procrastinate {r['peers']['procrastinate_version']}, no-op task "
        f"({r['peers']['procrastinate_settings']}) | {spread(runs['procrastinate'])} "
        f"| ours {noop / proc:.2f}× | — | — |",
        f"| our dispatcher into channels-redis (pipelined chunks) | {spread(runs['ours_layer'])} "
        f"| {layer / rowwise:.2f}× row by row | ≥ 5,000 rows/s | {status(layer >= 5000)} |",
        f"| the same, against row-by-row `group_send` | | {layer / rowwise:.2f}× "
        f"| ≥ 10× | {status(layer >= 10 * rowwise)} |",
        "| pipelined push alone (no database), same events "
        f"| {spread(runs['pipelined_push_only'])} "
        f"| {push_only / rowwise:.2f}× row by row | — | — |",
        f"| channels-redis `group_send`, row by row | {spread(runs['rowwise_group_send'])} "
        "| 1.00× | baseline | — |",
    ]
    return lines


def e2e_table(r: dict[str, Any]) -> list[str]:
    e2e = r["e2e"]
    lines = [
        "| offered msg/s | achieved | deliveries | p50 ms | p95 ms | p99 ms | max ms "
        "| lost | dup | overruns |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in e2e["steps"]:
        lines.append(
            f"| {s['offered_rate']:,} | {s['achieved_rate']:,.0f} | {s['deliveries']:,} "
            f"| {s['p50_ms']:,.1f} | {s['p95_ms']:,.1f} | {s['p99_ms']:,.1f} "
            f"| {s['max_ms']:,.1f} | {s['lost']:,} | {s['duplicated']:,} | {s['overruns']:,.0f} |"
        )
    return lines


def cpu_table(r: dict[str, Any]) -> list[str]:
    lines = [
        "| offered msg/s | worker | Daphne | PostgreSQL | Redis | bench clients | bench owners |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in r["e2e"]["steps"]:
        c = s["cpu_s_per_1000"]
        lines.append(
            f"| {s['offered_rate']:,} | {c['worker']:.2f} | {c['daphne']:.2f} "
            f"| {c['postgres']:.2f} | {c['redis']:.2f} | {c['clients']:.2f} "
            f"| {c['producer']:.2f} |"
        )
    return lines


def e2e_targets(r: dict[str, Any]) -> list[str]:
    steps = r["e2e"]["steps"]
    at_1000 = next((s for s in steps if s["offered_rate"] == 1000), None)
    under_slo = [s["offered_rate"] for s in steps if s["p95_ms"] < 1000 and s["lost"] == 0]
    best = max(under_slo, default=0)
    zero_overruns = all(s["overruns"] == 0 for s in steps if s["offered_rate"] <= 2000)
    lines = ["| target | measured | status |", "| --- | --- | --- |"]
    if at_1000:
        ok = at_1000["p95_ms"] <= 100 and at_1000["p99_ms"] <= 250 and at_1000["lost"] == 0
        lines.append(
            f"| 1,000 msg/s: p95 ≤ 100 ms, p99 ≤ 250 ms, nothing lost "
            f"| p95 {at_1000['p95_ms']:,.1f} ms, p99 {at_1000['p99_ms']:,.1f} ms, "
            f"lost {at_1000['lost']} | {status(ok)} |"
        )
    lines += [
        f"| highest offered rate with p95 < 1 s (spec SLO), nothing lost: ≥ 2,000 msg/s "
        f"| {best:,} msg/s | {status(best >= 2000)} |",
        f"| the same, issue 49's knee: ≥ 1,500 msg/s | {best:,} msg/s | {status(best >= 1500)} |",
        f"| idle wake, commit → hub client (median) ≤ 15 ms "
        f"| {r['e2e']['idle_wake_median_ms']:.1f} ms "
        f"| {status(r['e2e']['idle_wake_median_ms'] <= 15)} |",
        f"| idle wake, commit → channel-layer subscriber (median) "
        f"| {r['idle_wake_layer_median_ms']:.1f} ms | — |",
        f"| capacity overruns at ≤ 2,000 msg/s: 0 | "
        f"{sum(s['overruns'] for s in steps):,.0f} in all steps | {status(zero_overruns)} |",
    ]
    return lines


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    head = [
        f"Run of {r['finished_at']} on {m['cores']} cores, PostgreSQL {m['postgres']}, "
        f"Redis {m['redis']}, Python {m['python']}, `synchronous_commit = "
        f"{m['synchronous_commit']}`; {r['rows']:,} rows per drain, batch {r['batch_size']}, "
        f"medians of {r['repeats']} repeats; end to end: {r['e2e']['clients']} hub clients "
        f"in {r['e2e']['chats']} chats through one Daphne, {r['e2e']['duration_s']:g} s per "
        "rate, Poisson arrivals.",
        "",
        "![throughput and latency](performance.png)",
        "",
        "### Drain throughput",
        "",
        *drain_table(r),
        "",
        "### End to end (owner commit → hub client), open loop",
        "",
        "Latency is counted from each message's planned send time, so a producer that fell",
        "behind does not hide queueing (no coordinated omission).",
        "",
        *e2e_table(r),
        "",
        *e2e_targets(r),
        "",
        "### CPU seconds per 1,000 messages",
        "",
        *cpu_table(r),
    ]
    return "\n".join(head)


def write(results: dict[str, Any], page: Path) -> None:
    """Replace the generated block of the page (between the markers) with this run; the
    run it replaces goes first in the page's history (after HISTORY), unless it is this
    same run (re-rendered from bench/results.json)."""
    text = page.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new, old = markdown(results), text[start:end].strip()
    text = text[:start] + "\n" + new + "\n" + text[end:]
    if old and old.splitlines()[0] != new.splitlines()[0] and HISTORY in text:
        at = text.index(HISTORY) + len(HISTORY)
        text = text[:at] + "\n" + as_history(old) + "\n" + text[at:]
    page.write_text(text)


def as_history(block: str) -> str:
    """A replaced block as a section of the history: titled by its run, its headings one
    level down, without the plot (the image is the current run's)."""
    lines = block.splitlines()
    run = re.match(r"Run of (\d{4}-\d{2}-\d{2})", lines[0])
    title = f"### The run of {run.group(1) if run else 'an earlier day'}"
    kept = ["#" + line if line.startswith("### ") else line for line in lines]
    kept = [line for line in kept if not line.startswith("![")]
    return "\n".join([title, "", *kept]) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to PNG
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    names = {
        "raw_sql": "raw SQL\nceiling",
        "spec_sql": "raw SQL,\nspec claim",
        "ours_noop": "ours\nno-op",
        "pgqueuer": "PgQueuer",
        "procrastinate": "Procras-\ntinate",
        "ours_layer": "ours into\nchannels-redis",
        "rowwise_group_send": "group_send\nrow by row",
    }
    values = [median(results["drain"][k]) for k in names]
    bars = left.bar(list(names.values()), values, color="#4c72b0")
    left.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    left.set_ylabel("rows/s (median)")
    left.set_title(f"Drain of {results['rows']:,} rows, batch {results['batch_size']}")
    left.tick_params(axis="x", labelsize=8)

    steps = results["e2e"]["steps"]
    rates = [s["offered_rate"] for s in steps]
    for key, label in (("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99")):
        right.plot(rates, [s[key] for s in steps], marker="o", label=label)
    right.axhline(1000, color="red", linestyle="--", linewidth=1, label="SLO 1 s")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xticks(rates, [f"{r:,}" for r in rates])
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # log axis clutter
    right.set_xlabel("offered msg/s (Poisson)")
    right.set_ylabel("commit → client latency, ms")
    right.set_title(f"End to end, {results['e2e']['clients']} hub clients")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":  # re-render the page and the plot from bench/results.json
    import json

    root = Path(__file__).resolve().parent.parent
    results = json.loads((root / "bench" / "results.json").read_text())
    plot(results, root / "docs" / "performance.png")
    write(results, root / "docs" / "performance.md")
