"""Peers of bench/e2e_throughput.py, measured in the same run on the same PostgreSQL.

procrastinate (no-op jobs) and DBOS (two-step workflows), each end to end, each in a fresh
database of its own. Their packages never enter the app's venv: they are installed, pinned and
hash-checked (bench/requirements-peers.txt), into a venv this module builds once
(BENCH_PEERS_VENV, default ~/.cache/deploy-engine-bench/peers-<hash of the lock>), and each peer
runs there as a subprocess (procrastinate_noop.py, dbos_two_steps.py beside this file).
"""

import hashlib
import json
import os
import resource
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
LOCK = HERE.parent / "requirements-peers.txt"
JOBS = int(os.environ.get("BENCH_PEER_JOBS", "1000"))
RUNS = int(os.environ.get("BENCH_PEER_RUNS", "3"))
#: As many producers as the middle concurrency of ours (4 clients).
PRODUCERS = 4
PEERS = {"procrastinate": "procrastinate_noop.py", "DBOS": "dbos_two_steps.py"}


def peers_python() -> Path:
    """The peers' venv interpreter, built from the lock file the first time."""
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    default = Path.home() / ".cache" / "deploy-engine-bench" / f"peers-{digest}"
    venv = Path(os.environ.get("BENCH_PEERS_VENV", default))
    python = venv / "bin" / "python"
    installed = venv / ".installed"
    if not installed.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--require-hashes", "-r", str(LOCK)],
            check=True,
        )
        installed.touch()
    return python


def url_of(admin: str, dbname: str) -> str:
    """A postgresql:// URL to `dbname` on the admin URL's server (DBOS takes URLs only)."""
    info = psycopg.conninfo.conninfo_to_dict(admin)
    user = quote(info.pop("user", "postgres"))
    password = info.pop("password", "")
    info.pop("dbname", None)
    auth = f"{user}:{quote(password)}" if password else user
    return f"postgresql://{auth}@/{dbname}?{urlencode(info)}"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(admin: str, counters, settled, server_cpu) -> dict[str, dict]:
    """Per peer: its median rate, statements and CPU per unit of work, and how it was run.

    `settled(dbname)` reads a database's pg_stat_database counters once they are flushed;
    `server_cpu()` the PostgreSQL server's CPU seconds so far."""
    python = peers_python()
    out = {}
    for name, script in PEERS.items():
        dbname = f"bench_peer_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        url = url_of(admin, dbname)
        try:
            # Schema setup first, so the counters below hold the work only.
            subprocess.run(
                [str(python), str(HERE / script), "setup", url],
                check=True,
                capture_output=True,
                timeout=300,
            )
            before = settled(dbname)
            print(f"  peer {name} ...", file=sys.stderr, flush=True)
            # The peer's processes (its worker included, which it waits for) are children.
            python0, server0 = _children_cpu(), server_cpu()
            done = subprocess.run(
                [str(python), str(HERE / script), url] + [str(JOBS), str(RUNS), str(PRODUCERS)],
                check=True,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            python1, server1 = _children_cpu(), server_cpu()
            report = json.loads(done.stdout.strip().splitlines()[-1])
            after = settled(dbname)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(dbname)
                    )
                )
        rates = sorted(report["rates"])
        per_unit = {
            k: (after[k] - before[k] - (report["own_statements"] if k == "xact_commit" else 0))
            / report["jobs"]
            for k in counters
        }
        per_unit["python_cpu_ms"] = (python1 - python0) * 1000 / report["jobs"]
        per_unit["postgres_cpu_ms"] = (server1 - server0) * 1000 / report["jobs"]
        out[name] = {**report, "rate": rates[len(rates) // 2], "per_unit": per_unit}
        print(f"    {out[name]['rate']:.1f}/s {report['rates']}", file=sys.stderr, flush=True)
    return out
