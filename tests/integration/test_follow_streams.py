"""Every live surface follows the same way (engine/readside/follow.py): one keepalive setting, and a
failed read that never ends a stream. The board's JSON stream is covered in test_streams.py; these
are the page stream, the gateway stream and the timeline websocket."""

import json

import gevent
import pytest
import websocket
from gevent.pywsgi import WSGIServer
from gevent.queue import Empty, Queue
from psycopg.types.json import Jsonb

from tests.helpers import TimelineViewer, wait_for


class RawStream:
    """An SSE response read in its own greenlet: every block, keepalive comments included."""

    def __init__(self, app, path: str):
        self.blocks: Queue = Queue()
        self.greenlet = gevent.spawn(self._read, app, path)

    def _read(self, app, path):
        # The whole request runs in this greenlet: Flask pushes and pops its context here.
        response = app.test_client().get(path, buffered=False)
        try:
            assert response.status_code == 200, response.get_data(as_text=True)
            buffer = ""
            for chunk in response.response:
                buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    self.blocks.put(block)
        finally:
            self.blocks.put(None)  # the stream ended
            response.close()

    def until(self, predicate, timeout: float = 20.0) -> list[str]:
        """Blocks up to and including the first one `predicate` accepts."""
        seen = []
        deadline = gevent.get_hub().loop.now() + timeout
        while True:
            try:
                block = self.blocks.get(timeout=max(0.0, deadline - gevent.get_hub().loop.now()))
            except Empty:
                raise AssertionError(f"no matching block within {timeout}s; saw {seen}")
            if block is None:
                raise AssertionError(f"the stream ended; saw {seen}")
            seen.append(block)
            if predicate(block):
                return seen

    def close(self):
        self.greenlet.kill(block=True, timeout=5)


@pytest.fixture
def stream():
    """Factory: read an SSE path of an app; closed after the test."""
    opened = []

    def factory(app, path) -> RawStream:
        opened.append(RawStream(app, path))
        return opened[-1]

    yield factory
    for raw in opened:
        raw.close()


@pytest.fixture
def serve():
    """Factory: serve an app on loopback; its port. Stopped after the test."""
    servers = []

    def factory(app) -> int:
        server = WSGIServer(("127.0.0.1", 0), app, log=None)
        server.start()
        servers.append((server, app))
        return server.server_port

    yield factory
    for server, app in servers:
        app.extensions["engine"].shutdown()
        server.stop(timeout=5)


def kill_pool_connections(sql_conn):
    """What a failover or a cut link does to the pool: every connection but LISTEN's dies."""
    killed = sql_conn.execute(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND query <> 'LISTEN deploy_tasks'"
    ).fetchall()
    assert killed and all(r["ok"] for r in killed)  # the control: there were some to kill


def notify(sql_conn, task):
    sql_conn.execute(
        "SELECT notify_task_changed(%s, %s, %s)",
        (task["workspace"], task["project_id"], task["id"]),
    )


def is_keepalive(block: str) -> bool:
    return block.startswith(": keepalive")


def test_every_stream_keeps_alive_at_the_one_setting(make_app, stream, serve, insert_task):
    """STREAM_KEEPALIVE_S is every stream's cadence (the default, 15 s, would fail this test)."""
    task = insert_task(status="running", project_id="demo")
    app = make_app(stream_keepalive_s=0.2)
    board = stream(app, "/api/v1/projects/demo/tasks/stream")
    page = stream(app, "/projects/demo/stream")
    gateway = stream(app, f"/api/v1/tasks/{task['id']}/gateway/stream")
    for raw in (board, page, gateway):
        raw.until(is_keepalive, timeout=5)

    port = serve(app)
    origin = f"http://127.0.0.1:{app.extensions['engine'].settings.port}"
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/ws/tasks/{task['id']}/timeline", origin=origin, timeout=5
    )
    try:
        kinds = []
        while "ping" not in kinds:
            kinds.append(json.loads(ws.recv())["t"])  # times out after 5 s
        assert kinds[0] == "reset" and "ready" in kinds
    finally:
        ws.close()


def test_the_page_streams_bootstrap_is_one_message(make_app, stream, insert_task):
    """The page applies one message at once: a bootstrap's reset, every chip it re-inserts and
    the cards in one, so the dock never shows empty and a focused chip hands its focus on to its
    copy in the same step (the focus hand-over of static/js/focus.js)."""
    tasks = [insert_task(status="failed", project_id="demo") for _ in range(3)]
    app = make_app()
    page = stream(app, "/projects/demo/stream")
    bootstrap = page.until(lambda block: "data-reset" in block)[-1]
    for task in tasks:
        assert f'id="chip-{task["id"]}"' in bootstrap
    assert 'id="cards"' in bootstrap


def test_the_page_stream_survives_a_failed_re_read(make_app, stream, insert_task, sql_conn):
    """Like the board's JSON stream: a keepalive while it cannot read, then a fresh snapshot."""
    app = make_app()
    page = stream(app, "/projects/demo/stream")
    page.until(lambda block: "dock-chips" in block)  # the bootstrap (an empty dock)

    kill_pool_connections(sql_conn)
    task = insert_task(status="failed", project_id="demo")
    notify(sql_conn, task)
    page.until(lambda block: f"chip-{task['id']}" in block)
    # And it follows changes again.
    later = insert_task(status="failed", project_id="demo")
    notify(sql_conn, later)
    page.until(lambda block: f"chip-{later['id']}" in block)


def test_the_gateway_stream_resumes_after_a_failed_read(make_app, stream, insert_task, sql_conn):
    task = insert_task(status="running", project_id="demo")
    app = make_app()
    gateway = stream(app, f"/api/v1/tasks/{task['id']}/gateway/stream")
    gateway.until(lambda block: block.startswith("event: status"))

    kill_pool_connections(sql_conn)
    sql_conn.execute(
        "INSERT INTO deploy_task_events (task_id, kind, payload) VALUES (%s, 'gateway', %s)",
        (task["id"], Jsonb({"type": "delta", "turn": 1, "offset": 0, "text": "hello"})),
    )
    notify(sql_conn, task)
    seen = gateway.until(lambda block: block.startswith("event: delta"))
    assert '"text":"hello"' in seen[-1]

    sql_conn.execute(
        "UPDATE deploy_tasks SET status = 'completed', finished_at = now() WHERE id = %s",
        (task["id"],),
    )
    notify(sql_conn, task)
    seen = gateway.until(lambda block: block.startswith("event: end"))
    assert '"status":"completed"' in seen[-1]
    wait_for(lambda: gateway.greenlet.dead, message="the stream to close after its end")


def open_timeline(app, port, task) -> TimelineViewer:
    origin = f"http://127.0.0.1:{app.extensions['engine'].settings.port}"
    viewer = TimelineViewer(f"ws://127.0.0.1:{port}/ws/tasks/{task['id']}/timeline", origin)
    assert viewer.ready.wait(30), "the bootstrap never finished"
    return viewer


def test_the_timeline_survives_a_failed_re_read_and_its_last_viewer_ends_the_follow(
    make_app, serve, insert_task, sql_conn
):
    task = insert_task(status="running", project_id="demo")
    app = make_app()
    listener = app.extensions["engine"].listener
    viewer = open_timeline(app, serve(app), task)
    try:
        assert len(listener.subscribers) == 1  # the control: the channel follows the task

        kill_pool_connections(sql_conn)
        seq = sql_conn.execute(
            "INSERT INTO deploy_task_events (task_id, kind, payload) VALUES (%s, 'step', %s) "
            "RETURNING seq",
            (task["id"], Jsonb({"step": "apply", "state": "started"})),
        ).fetchone()["seq"]
        notify(sql_conn, task)
        wait_for(lambda: seq in viewer.seqs, message="the event, after a fresh bootstrap")
    finally:
        viewer.close()
    wait_for(lambda: not listener.subscribers, message="the channel to stop following")
