"""The chaos soak's report (bench/chaos.py): from the database a run leaves and every
client's log, the checker's verdict (bench/chaos_checker.py) with each violation named by
client, stream, offset and message, and the figures of docs/reliability.md: faults by
kind, deliveries, duplicates by the fault before them, the longest recovery per fault
kind, latency outside and during faults, and the plot of latency against time."""

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import chaos_checker

PROCESS_FAULTS = (
    "worker_kill",
    "worker_stop",
    "daphne_kill",
    "redis_restart",
    "postgres_restart",
    "slow_reader",
    "burst",
)
NETWORK_FAULTS = (  # through the fault proxies (bench/chaos_network.py)
    "redis_silent_worker",
    "redis_silent_hub",
    "postgres_silent_worker",
    "postgres_silent_hub",
    "partition",
    "latency",
    "flapping",
)
FAULT_KINDS = PROCESS_FAULTS + NETWORK_FAULTS
RECOVERED_LAG_MS = 500.0  # a commit-second whose p95 lag is below this: recovered
DURING = 30.0  # s after a fault's start that count as "during" it for latency


@dataclass
class Fault:
    kind: str
    at: float  # epoch s
    ended: float = 0.0
    detail: str = ""
    switched: float = 0.0  # a failover's promotion or Sentinel switch (epoch s)
    recovered: float | None = None  # s from `at` until deliveries were prompt again


COMMITTED = """
SELECT CASE target_kind WHEN 'User' THEN 'user:' || target_user_id ELSE 'chat:' || chat_id END,
       stream_offset, kind, message_id, status,
       CASE status WHEN 'Done' THEN extract(epoch FROM updated_at)::float8 END,
       extract(epoch FROM created_at)::float8, attempts
FROM messenger.realtime_outbox WHERE stream_offset IS NOT NULL
"""
# The chat-stream entry of every membership change, in offset order per chat.
CHANGES = """
SELECT 'chat:' || o.chat_id, o.stream_offset, e.kind, e.subject_user_id, e.id,
       extract(epoch FROM o.created_at)::float8
FROM messenger.realtime_outbox o JOIN messenger_chatevent e ON e.id = o.ref_id
WHERE o.kind = 'ChatUpdated' AND o.target_kind = 'ChatGroup'
  AND e.kind IN ('ChatCreated', 'ParticipantAdded', 'ParticipantRemoved')
ORDER BY o.chat_id, o.stream_offset
"""
CREATED_WITH = """
SELECT ref_id, target_user_id FROM messenger.realtime_outbox
WHERE kind = 'ChatUpdated' AND target_kind = 'User' AND ref_id = ANY(%s)
"""


async def memberships(conn: Any, users: list[str]) -> list[chaos_checker.Membership]:
    found = [chaos_checker.Membership(u, f"user:{u}") for u in users]
    changes = await (await conn.execute(CHANGES)).fetchall()
    created = [r[4] for r in changes if r[2] == "ChatCreated"]
    founders: dict[Any, list[str]] = defaultdict(list)
    for ref, user in await (await conn.execute(CREATED_WITH, (created,))).fetchall():
        founders[ref].append(str(user))
    open_since: dict[tuple[str, str], int] = {}
    for stream, offset, kind, subject, event, at in changes:
        joining = founders[event] if kind == "ChatCreated" else [str(subject)]
        if kind == "ParticipantRemoved":
            joined = open_since.pop((str(subject), stream), None)
            if joined is not None:
                found.append(chaos_checker.Membership(str(subject), stream, joined, offset, at))
            continue
        for user in joining:
            open_since.setdefault((user, stream), offset)
    found += [chaos_checker.Membership(u, s, j) for (u, s), j in open_since.items()]
    return found


def read_logs(directory: Path) -> tuple[dict[str, list[Any]], list[tuple[float, float]]]:
    """Each client's records in its order, and (receipt time, lag ms) of every message."""
    logs: dict[str, list[Any]] = defaultdict(list)
    lags: list[tuple[float, float]] = []
    for path in sorted(directory.glob("*.jsonl")):
        with path.open() as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                kind = r["k"]
                if kind == "got":
                    logs[r["c"]].append(chaos_checker.Got(r["s"], r["o"]))
                    if "lag" in r:
                        lags.append((r["t"], r["lag"]))
                elif kind == "told":
                    logs[r["c"]].append(chaos_checker.Told(r["s"], r["o"]))
                elif kind == "closed":
                    logs[r["c"]].append(chaos_checker.Closed(r["a"], r["t"]))
                elif kind == "connected":
                    logs[r["c"]].append(chaos_checker.Connected(r.get("t")))
                elif kind == "recovered":
                    logs[r["c"]].append(chaos_checker.Recovered())
    return logs, lags


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    return round(statistics.quantiles(values, n=20)[18], 1) if len(values) > 1 else values[0]


async def analyse(
    url: str, people: dict[str, Any], directory: Path, faults: list[Fault], started: float
) -> dict[str, Any]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        rows = await (await conn.execute(COMMITTED)).fetchall()
        members = await memberships(conn, people["users"])
    logs, lags = read_logs(directory)
    user_of = {f"c{i:04d}": u for i, u in enumerate(people["users"])}
    clients = {c: (user_of[c], log) for c, log in logs.items()}
    for c, u in user_of.items():
        clients.setdefault(c, (u, []))
    done_at = {(r[0], r[1]): r[5] for r in rows if r[5] is not None}
    committed_at = {(r[0], r[1]): r[6] for r in rows}
    retried = {(r[0], r[1]) for r in rows if r[7] > 1}  # the spec lets these come late
    found = chaos_checker.check(
        [(r[0], r[1]) for r in rows], members, clients, done_at, committed_at, retried
    )
    by_entry = {(r[0], r[1]): (r[2], str(r[3]) if r[3] else None) for r in rows}

    def named(items: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
        out = []
        for client, stream, offset in items[:20]:
            kind, message = by_entry.get((stream, offset), (None, None))
            out.append(
                {
                    "client": client,
                    "stream": stream,
                    "offset": offset,
                    "kind": kind,
                    "message": message,
                }
            )
        return out

    def in_a_fault(t: float) -> bool:
        return any(f.at <= t <= max(f.ended, f.at + DURING) for f in faults)

    in_fault = [lag for t, lag in lags if in_a_fault(t)]
    outside = [lag for t, lag in lags if not in_a_fault(t)]
    recovery: dict[str, float] = {}
    after_switch: dict[str, float] = {}  # a failover's recovery from its promotion
    for f in faults:
        seconds = f.recovered = recovered_after(lags, f.at)
        recovery[f.kind] = max(recovery.get(f.kind, 0.0), seconds)
        if f.switched:
            resumed = max(0.0, seconds - (f.switched - f.at))
            after_switch[f.kind] = max(after_switch.get(f.kind, 0.0), resumed)
    return {
        "committed": len(rows),
        "messages": sum(1 for r in rows if r[2] == "MessageReceived"),
        "deliveries": sum(
            1 for log in logs.values() for r in log if isinstance(r, chaos_checker.Got)
        ),
        "faults_by_kind": dict(sorted(_count(f.kind for f in faults).items())),
        **found.summary(),
        "duplicates_by_fault": duplicates_by_fault(directory, faults),
        "recovery_seconds": {k: round(v, 1) for k, v in sorted(recovery.items())},
        "resumed_after_switch_seconds": {k: round(v, 1) for k, v in sorted(after_switch.items())},
        "p95_ms": {"outside_faults": p95(outside), "during_faults": p95(in_fault)},
        "violations": {
            "lost": named(found.lost),
            "silent": named(found.silent),
            "foreign": named(found.foreign),
            "disorder": named(found.disorder),
            "withheld": named(found.withheld),
            "late": named(found.late),
        },
    }


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return counts


def recovered_after(lags: list[tuple[float, float]], at: float) -> float:
    """Seconds from `at` to the first commit-second after it whose deliveries' p95 lag
    is below RECOVERED_LAG_MS (messages committed then reached everyone promptly)."""
    by_second: dict[int, list[float]] = defaultdict(list)
    for t, lag in lags:
        committed = t - lag / 1000
        if committed >= at:
            by_second[int(committed - at)].append(lag)
    for second in sorted(by_second):
        if (p95(by_second[second]) or 0) < RECOVERED_LAG_MS:
            return float(second)
    return float("inf")


def duplicates_by_fault(directory: Path, faults: list[Fault]) -> dict[str, int]:
    """Each duplicate receipt counted against the latest fault before it ("none": none)."""
    seen: set[tuple[str, str, int]] = set()
    out: dict[str, int] = defaultdict(int)
    for path in sorted(directory.glob("*.jsonl")):
        with path.open() as f:
            for line in f:
                r = json.loads(line) if line.strip() else {}
                if r.get("k") != "got":
                    continue
                key = (r["c"], r["s"], r["o"])
                if key in seen:
                    before = [x for x in faults if x.at <= r["t"]]
                    out[before[-1].kind if before else "none"] += 1
                seen.add(key)
    return dict(out)


def plot(directory: Path, faults: list[Fault], started: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, lags = read_logs(directory)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.scatter([t - started for t, _ in lags], [max(lag, 1) for _, lag in lags], s=1, alpha=0.3)
    ax.set_yscale("log")
    palette = plt.get_cmap("tab20")
    colours = {kind: palette(i) for i, kind in enumerate(FAULT_KINDS)}
    for f in faults:
        ax.axvline(f.at - started, color=colours[f.kind], linewidth=1.2, label=f.kind)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=False))
    ax.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
    ax.set_xlabel("seconds since the start")
    ax.set_ylabel("delivery latency, ms (commit to receipt)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(result: dict[str, Any]) -> str:
    """The run's table for docs/reliability.md."""
    kinds = result["faults_by_kind"]
    recovery = ", ".join(f"{k} {v} s" for k, v in result["recovery_seconds"].items())
    drain, p95s = result["drain"], result["p95_ms"]
    violations = " / ".join(str(result[k]) for k in ("lost", "silent", "foreign", "disorder"))
    duplicates = f"{result['duplicates']} {result['duplicates_by_fault']}"
    latency = f"{p95s['outside_faults']} / {p95s['during_faults']} ms"
    left = f"{drain['seconds']} s; Pending {drain['pending']}, Quarantined {drain['quarantined']}"
    rows = [
        ("seed", result["seed"]),
        ("minutes", result["minutes"]),
        ("clients", result["clients"]["total"]),
        ("faults", f"{sum(kinds.values())}: " + ", ".join(f"{k} {n}" for k, n in kinds.items())),
        ("of them network faults", sum(n for k, n in kinds.items() if k in NETWORK_FAULTS)),
        ("events committed (messages)", f"{result['committed']} ({result['messages']})"),
        ("deliveries", result["deliveries"]),
        ("lost / silent / foreign / disorder", violations),
        ("withheld (read after a removal)", result["withheld"]),
        ("late (a retried row after later ones)", result["late"]),
        ("duplicates (by the fault before them)", duplicates),
        ("longest recovery per fault kind", recovery),
        ("p95 latency outside / during faults", latency),
        ("drain after the last fault", left),
    ]
    lines = ["| figure | value |", "| --- | --- |"]
    return "\n".join(lines + [f"| {k} | {v} |" for k, v in rows])


def passed(result: dict[str, Any]) -> bool:
    drain = result["drain"]
    clean = not (result["lost"] or result["silent"] or result["foreign"] or result["disorder"])
    return clean and drain["seconds"] is not None and drain["quarantined"] == 0
