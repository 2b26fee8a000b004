"""The image's environment, rebuilt outside Docker from the Dockerfile's own lines: the build
stage's COPY and RUN (pip into a fresh venv from the pinned requirements), the final stage's COPY
of the context minus .dockerignore, its ENV and CMD. It must boot and run a deployment."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.dockerfile import Dockerfile, DockerIgnore, copy_context
from tests.helpers import IMAGE_SOURCE, free_port, poll_status, wait_for

ROOT = Path(__file__).resolve().parents[2]
VENV = "/opt/venv"

#: Builds a venv from the lock: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(1200)


def test_the_dockerfile_environment_boots_gunicorn_and_runs_a_deployment(database_url, tmp_path):
    dockerfile = Dockerfile.read(ROOT / "Dockerfile")
    ignore = DockerIgnore((ROOT / ".dockerignore").read_text())
    build, final = dockerfile.stages[0], dockerfile.stages[-1]
    venv = tmp_path / "venv"

    workdir = tmp_path / "build"
    workdir.mkdir()
    for origin, sources, _ in build.copies:
        assert origin is None
        copy_context(ROOT, sources, workdir, ignore)
    for run in build.runs:
        # The same command; the pip cache is allowed here only to keep the suite quick.
        command = run.replace(VENV, str(venv)).replace("--no-cache-dir", "")
        command = command.replace("python -m venv", f"{sys.executable} -m venv", 1)
        done = subprocess.run(
            ["sh", "-c", command],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    app_dir = tmp_path / "app"
    app_dir.mkdir()
    for origin, sources, dest in final.copies:
        if origin is not None:
            assert (origin, sources, dest) == (build.name, [VENV], VENV)  # the venv built above
            continue
        copy_context(ROOT, sources, app_dir, ignore)
    assert (app_dir / "wsgi.py").is_file() and (app_dir / "engine").is_dir()
    for left_out in ("tests", ".venv", ".git", "bench", "Dockerfile"):
        assert not (app_dir / left_out).exists(), f"{left_out} would ship in the image"

    port = free_port()
    env = {
        key: value.replace(VENV, str(venv)).replace("$PATH", os.environ["PATH"])
        for key, value in final.env.items()
    }
    # Loopback only on the test machine; the image binds 0.0.0.0.
    env.update(
        HOST="127.0.0.1",
        PORT=str(port),
        DATABASE_URL=database_url,
        DATA_DIR=str(tmp_path / "data"),
        HOME=str(tmp_path),
    )
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            final.cmd,
            cwd=app_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy():
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                return requests.get(base + "/healthz", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(healthy, 60, interval=0.2, message="the image's gunicorn to answer")
        created = requests.post(
            base + "/api/v1/tasks", timeout=10, json={"projectId": "demo", "source": IMAGE_SOURCE}
        )
        assert created.status_code == 201, created.text

        task_url = f"{base}/api/v1/tasks/{created.json()['id']}"
        poll_status(
            lambda: requests.get(task_url, timeout=5).json(),
            ("completed",),
            30,
            interval=0.1,
            message="the deployment",
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
