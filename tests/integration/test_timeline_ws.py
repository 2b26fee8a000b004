"""The timeline websocket's live frames, through a real server and a real websocket client."""

import psycopg
import pytest
from gevent.pywsgi import WSGIServer
from psycopg.types.json import Jsonb

from blueprints.streams.timeline_hub import LATE_COMMIT_SWEEP_S
from tests.helpers import TimelineViewer, wait_for

STEP = (
    "INSERT INTO deploy_task_events (task_id, kind, payload) VALUES (%s, 'step', %s) RETURNING seq"
)


@pytest.fixture
def viewer(make_app):
    """Factory: serve an app on loopback and open a viewer of one task's timeline."""
    opened = []

    def factory(task_id) -> TimelineViewer:
        app = make_app()
        server = WSGIServer(("127.0.0.1", 0), app, log=None)
        server.start()
        opened.append((server, app))
        origin = f"http://127.0.0.1:{app.extensions['engine'].settings.port}"
        url = f"ws://127.0.0.1:{server.server_port}/ws/tasks/{task_id}/timeline"
        seen = TimelineViewer(url, origin)
        opened.append(seen)
        assert seen.ready.wait(30), "the bootstrap never finished"
        return seen

    yield factory
    for item in reversed(opened):
        if isinstance(item, TimelineViewer):
            item.close()
        else:
            server, app = item
            app.extensions["engine"].shutdown()
            server.stop(timeout=5)


def test_an_event_committed_after_a_newer_one_still_reaches_the_viewer(
    viewer, insert_task, database_url, sql_conn
):
    """A notification reads only what follows the newest event seen; the late-commit sweep
    delivers an event whose seq was taken earlier but committed later."""
    task = insert_task(status="running", project_id="demo")
    seen = viewer(task["id"])
    with psycopg.connect(database_url) as late:  # one open transaction: its seq is taken now
        early_seq = late.execute(
            STEP, (task["id"], Jsonb({"step": "render", "state": "started"}))
        ).fetchone()[0]
        newer_seq = sql_conn.execute(
            STEP, (task["id"], Jsonb({"step": "apply", "state": "started"}))
        ).fetchone()["seq"]
        sql_conn.execute("SELECT notify_task_changed(%s, %s, %s)", ("default", "demo", task["id"]))
        # The control: the newer event arrives on its notification.
        wait_for(lambda: newer_seq in seen.seqs, message="the newer event's frame")
        assert early_seq < newer_seq and early_seq not in seen.seqs
        late.commit()  # no notification of its own: only the sweep can find it
    wait_for(
        lambda: early_seq in seen.seqs,
        timeout=LATE_COMMIT_SWEEP_S + 5,
        message="the late-committed event's frame",
    )
    assert seen.seqs.count(early_seq) == 1 and seen.seqs.count(newer_seq) == 1


def test_a_notification_sends_only_the_new_event(viewer, insert_task, sql_conn):
    task = insert_task(status="running", project_id="demo")
    seen = viewer(task["id"])
    sent = []
    for step in ("render", "apply", "verify"):
        sent.append(
            sql_conn.execute(
                STEP, (task["id"], Jsonb({"step": step, "state": "started"}))
            ).fetchone()["seq"]
        )
        sql_conn.execute("SELECT notify_task_changed(%s, %s, %s)", ("default", "demo", task["id"]))
        wait_for(lambda s=sent[-1]: s in seen.seqs, message=f"the {step} frame")
    assert [s for s in seen.seqs if s in sent] == sent  # each once, in order
