"""The production install: a venv built from the app lock file alone boots the production command
(docs/operating.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.helpers import ROOT, ServerProcess, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


#: Downloaded wheels kept between runs: the index answers uncacheably here, and a fresh download
#: of the lock takes minutes. The hashes in the lock file are checked on every install anyway.
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "deploy-engine-wheels"
LOCK = ROOT / "requirements.txt"


def pip(*args, env):
    """This suite's pip (the target venv has none of its own: nothing but the lock goes in)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True
    )


def test_a_venv_from_the_app_lock_alone_serves_with_gevent_workers(database_url, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    target = ("--python", str(venv / "bin" / "python"))
    # What a container image does: the lock file alone, every artifact checked against its hash.
    install = (
        *target,
        "install",
        "--quiet",
        "--require-hashes",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        "-r",
        str(LOCK),
    )
    if pip(*install, env=env).returncode != 0:
        fetched = pip(
            "download",
            "--quiet",
            "--require-hashes",
            "-d",
            str(WHEELHOUSE),
            "-r",
            str(LOCK),
            env=env,
        )
        assert fetched.returncode == 0, fetched.stderr[-4000:]
        installed = pip(*install, env=env)
        assert installed.returncode == 0, installed.stderr[-4000:]
    check = pip(*target, "check", env=env)
    assert check.returncode == 0, check.stdout
    frozen = pip(*target, "freeze", env=env).stdout.lower().replace("_", "-")
    assert "packaging==" in frozen and "pytest" not in frozen  # the app lock, and only it

    port = free_port()
    server = ServerProcess(
        [str(venv / "bin" / "gunicorn"), "-c", "gunicorn.conf.py", "-w", "2", "wsgi:app"],
        {
            **env,
            "DATABASE_URL": database_url,
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "PYTHONUNBUFFERED": "1",
        },
        port,
        tmp_path / "gunicorn.log",
    )
    try:
        server.wait_healthy(timeout=120)
        owners = set()

        def both_workers_answered():
            response = requests.get(server.base + "/healthz", timeout=5)
            assert response.ok, response.text
            owners.add(response.headers["X-Served-By"])
            if server.proc.poll() is not None:
                raise AssertionError(server.output())
            return len(owners) == 2

        wait_for(
            both_workers_answered,
            timeout=120,
            interval=0.05,
            message="both gevent workers to answer",
        )
        assert "gevent" in server.output()
    finally:
        server.stop()
