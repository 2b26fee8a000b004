"""Same-work peers of bench/e2e_throughput.py: Flask + procrastinate, Flask + Celery.

Both are bench/peers/flask_peer.py (what they do, and how they run, is said there) behind gunicorn
with 2 gevent workers (bench/peers/gunicorn_peer.py), plus one worker process of their queue.
Their packages never enter the app's venv: they are installed, pinned and hash-checked
(bench/requirements-peers.txt), into a venv this module builds once (BENCH_PEERS_VENV, default
~/.cache/deploy-engine-bench/peers-<hash of the lock>), and every peer process runs there.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE.parent / "requirements-peers.txt"
#: Celery's broker: the machine's Redis (a database index of its own).
BROKER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
#: Jobs each peer's worker runs at once.
CONCURRENCY = 16


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


def environment(queue: str, database_url: str, port: int) -> dict[str, str]:
    """The environment of one peer's processes."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "PEER_QUEUE": queue,
        "PEER_BROKER_URL": BROKER_URL,
        "PEER_CONCURRENCY": str(CONCURRENCY),
        "PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }


def setup(queue: str, database_url: str) -> None:
    """The peer's tables (and procrastinate's schema) in its database."""
    bin_dir = peers_venv()
    subprocess.run(
        [str(bin_dir / "python"), "flask_peer.py", "setup"],
        cwd=HERE,
        env=environment(queue, database_url, 0),
        check=True,
        capture_output=True,
        timeout=300,
    )


def commands(queue: str) -> tuple[list[str], list[str]]:
    """(the HTTP service's argv, the queue worker's argv), run from this directory."""
    bin_dir = peers_venv()
    web = [str(bin_dir / "gunicorn"), "-c", str(HERE / "gunicorn_peer.py"), "flask_peer:app"]
    if queue == "procrastinate":
        worker = [str(bin_dir / "python"), "flask_peer.py", "procrastinate-worker"]
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
