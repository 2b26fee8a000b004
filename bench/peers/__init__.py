"""Same-work peers of bench/e2e_throughput.py: Flask + procrastinate, Flask + Celery.

- `procrastinate` and `celery`: bench/peers/flask_peer.py (what they do, and how they run, is
  said there) behind gunicorn with 2 gevent workers (bench/peers/gunicorn_peer.py), plus one
  worker process of their queue.
- `procrastinate-minimal`: bench/peers/procrastinate_minimal.py, the same work as the
  procrastinate peer written apart, as little as procrastinate's documentation needs; the
  benchmark checks that the two spend the same CPU per deployment (within 10%), which a
  handicap in either would break.

Their packages never enter the app's venv: they are installed, pinned and hash-checked
(bench/requirements-peers.txt), into a venv this module builds once (BENCH_PEERS_VENV, default
~/.cache/deploy-engine-bench/peers-<hash of the lock>), and every peer process runs there.

Each peer is written as its library's documentation recommends for throughput; REVISION names
the version of the peers that results were measured against. Revision 2 removed what a review
against the documentation found in revision 1 (results measured against it name no revision):
- every psycopg pool in autocommit (psycopg, "Transactions management": a connection that is
  not in autocommit starts a transaction before its first statement, so a single statement was
  BEGIN, the statement and COMMIT, three round trips); the create's two statements stay one
  explicit `conn.transaction()`;
- procrastinate's own pool (fetch and finish of every job) was psycopg_pool's default of 4
  connections for 16 concurrent jobs; procrastinate's "Mind the size of your PostgreSQL pool":
  with short jobs the pool needs as many connections as the concurrency, plus one. The worker
  now runs on one pool of the peer's own, 17 connections, for procrastinate and the jobs
  (procrastinate's "Use an external pool": `open_async(pool=...)`), which also spares it the
  empty query procrastinate's pool sends to check every connection it lends (two round trips a
  job; the service's pool checks none); the job pool was opened inside the first job;
- the defer is procrastinate's documented `configure(connection=conn).defer(...)` inside the
  request's transaction ("Using an external database connection"), not its SQL function;
- a job borrows one connection for its six statements, not one per statement;
- the marshmallow schema is built once per process, not per request;
- the queue workers `gc.freeze()` what they loaded once started, as the service's workers do;
- Celery: `worker_prefetch_multiplier` 64 ("Optimizing": for many short tasks, a large
  multiplier) and `broker_pool_limit` sized to a web worker's pool ("the value should be based on
  the number of active threads/green-threads using broker connections"); the create's row is
  one autocommit INSERT.
Both peers log warnings only: at its CLI's default level (INFO) procrastinate's worker writes two
lines per job.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE.parent / "requirements-peers.txt"
#: The peers' code as measured (see the module's docstring); shown beside every result.
REVISION = "2"
#: Jobs each peer's worker runs at once.
CONCURRENCY = 16
#: The peers, by the name the benchmark gives them.
NAMES = ("procrastinate", "procrastinate-minimal", "celery")


def peers_venv() -> Path:
    """The peers' venv, built from the lock file the first time; its bin directory."""
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
    return venv / "bin"


def environment(peer: str, database_url: str, port: int, broker_url: str = "") -> dict:
    """The environment of one peer's processes."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "PEER_QUEUE": "celery" if peer == "celery" else "procrastinate",
        "PEER_BROKER_URL": broker_url,
        "PEER_CONCURRENCY": str(CONCURRENCY),
        "PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        # The peers' modules, for the console scripts (procrastinate's CLI) that import them.
        "PYTHONPATH": str(HERE),
    }


def _module(peer: str) -> str:
    return "procrastinate_minimal" if peer == "procrastinate-minimal" else "flask_peer"


def setup(peer: str, database_url: str) -> None:
    """The peer's tables and procrastinate's schema in its database."""
    subprocess.run(
        [str(peers_venv() / "python"), f"{_module(peer)}.py", "setup"],
        cwd=HERE,
        env=environment(peer, database_url, 0),
        check=True,
        capture_output=True,
        timeout=300,
    )


def commands(peer: str) -> tuple[list[str], list[str]]:
    """(the HTTP service's argv, the queue worker's argv), run from this directory."""
    bin_dir = peers_venv()
    app = "procrastinate_minimal:web" if peer == "procrastinate-minimal" else "flask_peer:app"
    web = [str(bin_dir / "gunicorn"), "-c", str(HERE / "gunicorn_peer.py"), app]
    if peer == "procrastinate":
        worker = [str(bin_dir / "python"), "flask_peer.py", "procrastinate-worker"]
    elif peer == "procrastinate-minimal":
        worker = [
            str(bin_dir / "procrastinate"),
            "--app=procrastinate_minimal.tasks",
            "--log-level=warning",
            "worker",
            "--queues=deploy",
            f"--concurrency={CONCURRENCY}",
        ]
    else:
        worker = [
            str(bin_dir / "celery"),
            "-A",
            "flask_peer:celery",
            "worker",
            "-P",
            "gevent",
            "-c",
            str(CONCURRENCY),
            "-Q",
            "deploy",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ]
    return web, worker


def versions() -> dict[str, str]:
    """The peers' queue packages and their versions, as installed."""
    bin_dir = peers_venv()
    out = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "import celery, procrastinate; print(procrastinate.__version__, celery.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {"procrastinate": out[0], "celery": out[1]}
