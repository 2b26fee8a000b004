"""What bench/e2e_throughput.py prints: per PostgreSQL build, the medians of the rounds, each
round's own ratios, the cross-check of the two procrastinate peers and pg_stat_statements per
statement; and everything as JSON (BENCH_E2E_JSON)."""

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench import peers
from bench.common import median, percentile

ROOT = Path(__file__).resolve().parent.parent

#: The cross-check: the procrastinate peer's CPU per deployment over the minimal one's.
CROSS_CHECK = ("procrastinate", "procrastinate-minimal")
CROSS_CHECK_TOLERANCE = 0.10


@dataclass
class RunResult:
    system: str
    clients: int
    deployments: int
    rate: float
    create_ms: list[float]
    done_ms: list[float]
    #: (seconds after the run's first create, create -> completed ms) per deployment.
    timeline: list[tuple[float, float]]
    not_completed: int
    refused: int
    server_cpu_ms: float
    postgres_cpu_ms: float
    redis_cpu_ms: float
    #: The load generator's (this process's) CPU while it sent the run's creates.
    load_cpu_ms: float
    #: pg_stat_statements of the system's database over the run: (query, calls, total ms,
    #: rows, WAL bytes); empty when the server does not load it.
    statements: list[tuple[str, int, float, int, int]] = field(default_factory=list)

    @property
    def cpu_ms(self) -> float:
        return self.server_cpu_ms + self.postgres_cpu_ms + self.redis_cpu_ms


def summary_line(r: RunResult) -> str:
    redis = f" (+{r.redis_cpu_ms:.1f} Redis)" if r.redis_cpu_ms else ""
    return (
        f"  {r.system:>21} {r.clients:>2} clients: {r.rate:6.1f}/s ({r.deployments} deployments,"
        f" {r.refused} refused), create p50 {percentile(r.create_ms, 50):.1f}"
        f" p99 {percentile(r.create_ms, 99):.1f} ms, done p50 {percentile(r.done_ms, 50):,.0f}"
        f" p99 {percentile(r.done_ms, 99):,.0f} ms, CPU/deployment server"
        f" {r.server_cpu_ms:.2f}{redis} / PostgreSQL {r.postgres_cpu_ms:.2f} ms"
        f" (load generator {r.load_cpu_ms:.2f})"
    )


def by_system(runs: list[RunResult], clients_levels, systems) -> dict:
    """Per (clients, system), the median over rounds of each figure."""
    table = {}
    for clients in clients_levels:
        for name in systems:
            mine = [r for r in runs if r.clients == clients and r.system == name]
            if not mine:
                continue
            table[(clients, name)] = {
                "rate": median([r.rate for r in mine]),
                "create_p50": median([percentile(r.create_ms, 50) for r in mine]),
                "create_p99": median([percentile(r.create_ms, 99) for r in mine]),
                "done_p50": median([percentile(r.done_ms, 50) for r in mine]),
                "done_p99": median([percentile(r.done_ms, 99) for r in mine]),
                "server_cpu_ms": median([r.server_cpu_ms for r in mine]),
                "postgres_cpu_ms": median([r.postgres_cpu_ms for r in mine]),
                "redis_cpu_ms": median([r.redis_cpu_ms for r in mine]),
                "cpu_ms": median([r.cpu_ms for r in mine]),
                "load_cpu_ms": median([r.load_cpu_ms for r in mine]),
                "refused": sum(r.refused for r in mine),
                "deployments": sum(r.deployments for r in mine),
                "not_completed": sum(r.not_completed for r in mine),
            }
    return table


def paired_ratios(rounds: list[list[RunResult]]) -> dict[tuple[int, str], list[tuple]]:
    """Per (clients, peer), each round's ours / peer (rate, CPU): the two ran minutes apart in the
    same round, so a drift of the machine's speed over the run (a quarter, seen here) moves
    both, where the medians of the rounds may pair our fast round with a peer's slow one."""
    out: dict[tuple[int, str], list[tuple]] = {}
    for mine in rounds:
        by = {(r.clients, r.system): r for r in mine}
        for (clients, name), r in by.items():
            ours = by.get((clients, "ours"))
            if name != "ours" and ours:
                out.setdefault((clients, name), []).append(
                    (ours.rate / r.rate, ours.cpu_ms / r.cpu_ms)
                )
    return out


def against_the_best(rounds: list[list[RunResult]]) -> dict[int, list[tuple]]:
    """Per clients, each round's (our rate / the fastest peer's, our CPU / the cheapest peer's)."""
    out: dict[int, list[tuple]] = {}
    for mine in rounds:
        for clients in sorted({r.clients for r in mine}):
            here = [r for r in mine if r.clients == clients]
            ours = next((r for r in here if r.system == "ours"), None)
            peers = [r for r in here if r.system != "ours"]
            if ours and peers:
                out.setdefault(clients, []).append(
                    (
                        ours.rate / max(r.rate for r in peers),
                        ours.cpu_ms / min(r.cpu_ms for r in peers),
                    )
                )
    return out


def cross_check(rounds: list[list[RunResult]]) -> dict[int, list[float]]:
    """Per clients, each round's procrastinate peer CPU per deployment over the minimal one's."""
    out: dict[int, list[float]] = {}
    main, minimal = CROSS_CHECK
    for mine in rounds:
        by = {(r.clients, r.system): r for r in mine}
        for (clients, name), r in by.items():
            if name == main and (clients, minimal) in by:
                out.setdefault(clients, []).append(r.cpu_ms / by[(clients, minimal)].cpu_ms)
    return out


def _series(values) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def paired_markdown(paired, best, checked) -> str:
    """Each round's own ratios against each peer and the round's best, and the cross-check."""
    parts = []
    if paired:
        lines = [
            "Each round's own ratio (ours / peer, the same round), and their median\n",
            "| clients | peer | rate, per round | rate, median | CPU, per round | CPU, median |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        rows = [*paired.items()] + [
            ((clients, "the round's fastest (rate) and cheapest (CPU) peer"), ratios)
            for clients, ratios in best.items()
        ]
        for (clients, name), ratios in rows:
            rates, cpus = [r for r, _ in ratios], [c for _, c in ratios]
            lines.append(
                f"| {clients} | {name} | {_series(rates)} | {median(rates):.2f}x "
                f"| {_series(cpus)} | {median(cpus):.2f}x |"
            )
        parts.append("\n".join(lines))
    if checked:
        lines = [
            f"Cross-check, CPU per deployment of {CROSS_CHECK[0]} / {CROSS_CHECK[1]} (the same "
            f"work written twice; within {CROSS_CHECK_TOLERANCE:.0%} unless one has a handicap)\n",
            "| clients | per round | median |",
            "| --- | --- | --- |",
        ]
        for clients, ratios in checked.items():
            lines.append(f"| {clients} | {_series(ratios)} | {median(ratios):.2f}x |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def table_markdown(table: dict, label) -> str:
    lines = [
        "| clients | system | deployments/s | create p50 / p99 | create -> completed p50 / p99 "
        "| CPU per deployment: server / PostgreSQL | ours / peer: rate, CPU "
        "| load generator CPU per deployment | refused (503) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (clients, name), t in table.items():
        ours = table.get((clients, "ours"))
        ratio = (
            f"{ours['rate'] / t['rate']:.2f}x, {ours['cpu_ms'] / t['cpu_ms']:.2f}x"
            if ours and name != "ours"
            else ""
        )
        redis = f" (+{t['redis_cpu_ms']:.1f} Redis)" if t["redis_cpu_ms"] else ""
        lines.append(
            f"| {clients} | {label(name)} | {t['rate']:.0f} "
            f"| {t['create_p50']:.1f} / {t['create_p99']:.1f} ms "
            f"| {t['done_p50']:,.0f} / {t['done_p99']:,.0f} ms "
            f"| {t['server_cpu_ms']:.2f}{redis} / {t['postgres_cpu_ms']:.2f} ms | {ratio} "
            f"| {t['load_cpu_ms']:.2f} ms | {t['refused']:,} |"
        )
    return "\n".join(lines)


def statements_by_system(runs: list[RunResult], clients: int) -> dict[str, dict]:
    """Per system, at `clients`, its statements summed over the rounds: {query: [calls, total
    ms, rows, WAL bytes]} and the deployments they served."""
    out: dict[str, dict] = {}
    for r in runs:
        if r.clients != clients or not r.statements:
            continue
        mine = out.setdefault(r.system, {"deployments": 0, "queries": {}})
        mine["deployments"] += r.deployments
        for query, calls, total_ms, rows, wal in r.statements:
            sums = mine["queries"].setdefault(query, [0, 0.0, 0, 0])
            for i, value in enumerate((calls, total_ms, rows, wal)):
                sums[i] += value
    return out


def statements_markdown(statements: dict[str, dict], clients: int, label) -> str:
    """One table per system: pg_stat_statements per statement, per deployment."""
    parts = []
    for name, mine in statements.items():
        n = mine["deployments"]
        ordered = sorted(mine["queries"].items(), key=lambda item: -item[1][1])
        lines = [
            f"{label(name)}, {clients} clients, {n:,} deployments (pg_stat_statements over the "
            "rounds; the harness's own queries left out)\n",
            "| statement | calls per deployment | mean time | rows per call | WAL bytes per call |",
            "| --- | --- | --- | --- | --- |",
        ]
        for query, (calls, total_ms, rows, wal) in ordered:
            shown = query if len(query) <= 100 else query[:97] + "..."
            lines.append(
                f"| `{shown.replace('|', '/')}` | {calls / n:.2f} | {total_ms / calls * 1000:.0f} "
                f"us | {rows / calls:.2f} | {wal / calls:,.0f} |"
            )
        calls = sum(q[0] for q in mine["queries"].values())
        total_ms = sum(q[1] for q in mine["queries"].values())
        wal = sum(q[3] for q in mine["queries"].values())
        lines.append(
            f"| **all** | {calls / n:.2f} | {total_ms / n * 1000:.0f} us per deployment | "
            f"| {wal / n:,.0f} per deployment |"
        )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def commit() -> str:
    """The commit measured, marked when the tree has changes of its own."""
    root = ROOT
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head or 'unknown'}{' with uncommitted changes' if dirty else ''}"


def labeller(versions: dict[str, str], redis_version: str):
    def label(name: str) -> str:
        if name == "ours":
            return "ours"
        revision = f"peers rev. {peers.REVISION}"
        if name == "procrastinate":
            return f"Flask + procrastinate {versions['procrastinate']} ({revision})"
        if name == "procrastinate-minimal":
            return f"Flask + procrastinate {versions['procrastinate']}, minimal ({revision})"
        return f"Flask + Celery {versions['celery']} (Redis {redis_version}, {revision})"

    return label


def to_json(path: str, meta: dict, builds: list[dict]) -> None:
    """Every run of every build, with what was measured where (BENCH_E2E_JSON)."""

    def run(r: RunResult) -> dict:
        return {
            "system": r.system,
            "clients": r.clients,
            "deployments": r.deployments,
            "rate": r.rate,
            "create_ms_p50": percentile(r.create_ms, 50),
            "create_ms_p99": percentile(r.create_ms, 99),
            "done_ms_p50": percentile(r.done_ms, 50),
            "done_ms_p99": percentile(r.done_ms, 99),
            "not_completed": r.not_completed,
            "refused": r.refused,
            "server_cpu_ms": r.server_cpu_ms,
            "postgres_cpu_ms": r.postgres_cpu_ms,
            "redis_cpu_ms": r.redis_cpu_ms,
            "load_cpu_ms": r.load_cpu_ms,
            "statements": [
                dict(zip(("query", "calls", "total_ms", "rows", "wal_bytes"), s, strict=True))
                for s in r.statements
            ],
        }

    doc = {
        **meta,
        "builds": [
            {
                "postgres": build["postgres"],
                "rounds": [[run(r) for r in mine] for mine in build["rounds"]],
                "overload": {state: run(r) for state, r in build["overload"].items()},
            }
            for build in builds
        ],
    }
    with open(path, "w") as out:
        json.dump(doc, out, indent=1)
