"""An accepted cancel always ends the task cancelled, whenever it lands on a run that parks.

Every kind of run that parks blocked (a rollback or a redeploy that must ask for a secret again,
a template missing inputs, a prompt whose model asks for inputs) is cancelled 0-49 ms after its
create answered, one round per millisecond: before the run starts, while it writes its park,
once it is parked. Then at the one instant that was lost, deterministically: the cancel recorded
inside the run's last integration call before it parks, so the run goes on to write its park
with the abort already fired. Each cancel is 200 and the task ends cancelled, never blocked with
the cancel pending (nothing resolved that: the task stayed blocked and every later rollback of
its app was 409). And should a cancel be pending on a task no run holds (a row parked so before
the rule), no input submission resumes it and the reaper's cancel deadline ends it.
"""

import json
import time
from datetime import timedelta

import pytest

from engine.core.status import ACTIVE, TRANSITIONS, Status
from engine.integrations import Integrations
from engine.integrations.gateway import GatewayClient
from tests.fakes import FakeDevbox, FakeGatewayServer, Reply
from tests.helpers import create, events, poll_status, redeploy, snapshot, template

#: Rounds per kind; round i cancels i ms after the create answered.
ROUNDS = 50
SECRET_ENV = {"kind": "image", "image": "nginx:1.27", "name": "web", "env": {"API_TOKEN": "t" * 24}}
ASKING = json.dumps({"needInputs": [{"name": "TAG", "required": True}]})
#: How a cancelled round ended (the last status event's from and by): the run acknowledged a
#: cancel it met before parking (itemized), or the cancel found the task parked already.
ACKNOWLEDGED, CANCELLED_WHILE_PARKED = ("running", "runner"), ("blocked", "dev")


# -- runs that park --------------------------------------------------------------------------------
def rollbacks(client, cluster):
    """What starts a rollback to a completed deployment whose env held a secret: it must ask for
    the secret again. 201 every time: a cancelled rollback leaves the app free for the next."""
    v1 = create(client, SECRET_ENV)
    done = poll_status(lambda: snapshot(client, v1["id"]), ("completed",))
    assert done["sensitiveKeys"] == ["API_TOKEN"]

    def start():
        answer = client.post(f"/api/v1/tasks/{v1['id']}/rollback")
        assert answer.status_code == 201, answer.get_json()
        return answer.get_json()

    return start


def redeploys(client, cluster):
    """What starts a redeploy of a failed deployment whose env held a secret."""
    cluster.fail_kinds = {"Deployment"}
    failed = create(client, SECRET_ENV)
    poll_status(lambda: snapshot(client, failed["id"]), ("failed",))
    cluster.fail_kinds = set()
    return lambda: redeploy(client, failed["id"])


def templates(client, cluster):
    """What starts a template deployment missing a required input (the password)."""
    return lambda: create(client, template("postgresql", database="db"))


def prompts(client, gateway):
    """What starts a prompt whose model answers by asking for an input."""

    def start():
        gateway.script(Reply(text=ASKING, chunk_chars=len(ASKING)))
        return create(client, {"kind": "prompt", "prompt": "deploy nginx"})

    return start


#: Each kind of run that parks: what prepares it and returns the call that starts one.
PARKING = {"rollback": rollbacks, "redeploy": redeploys, "template": templates}


def cancelled(client, task_id) -> tuple[dict, tuple]:
    """The task's snapshot once no run holds it, asserted cancelled like any cancel; and how it
    ended (ACKNOWLEDGED or CANCELLED_WHILE_PARKED)."""
    # Settled: blocked too, for a cancel pending on a parked task is the one that was lost.
    snap = poll_status(
        lambda: snapshot(client, task_id),
        ("blocked", "completed", "failed", "cancelled"),
        interval=0.005,
    )
    assert (snap["status"], snap["pendingInputs"]) == ("cancelled", None), snap
    assert snap["cancelRequestedAt"] is not None and snap["finishedAt"] is not None
    last = [e["payload"] for e in events(client, task_id) if e["kind"] == "status"][-1]
    ending = (last["from"], last["by"])
    if ending == ACKNOWLEDGED:  # itemized, like every cancel a run acknowledges
        assert last["reason"] == "cancel_acknowledged"
        assert snap["cancellation"]["applied"] == "nothing", snap["cancellation"]
    else:
        assert ending == CANCELLED_WHILE_PARKED, last
    return snap, ending


def cancel_each_millisecond(client, start) -> None:
    """Start a run with `start()` and cancel it i ms later, for i in 0..ROUNDS-1, then once more
    when it is surely parked: each cancel is 200 and each task ends cancelled."""
    for i in range(ROUNDS):
        task = start()
        time.sleep(i / 1000)
        answer = client.post(f"/api/v1/tasks/{task['id']}/cancel")
        assert answer.status_code == 200, (i, answer.get_json())
        assert answer.get_json()["cancelRequestedAt"] is not None
        try:
            cancelled(client, task["id"])
        except AssertionError as exc:
            raise AssertionError(f"round {i} (cancelled {i} ms after the create)") from exc
    # However slow the machine, the last instant is reached too: a cancel once it has parked.
    task = start()
    poll_status(lambda: snapshot(client, task["id"]), ("blocked",))
    assert client.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 200
    assert cancelled(client, task["id"])[1] == CANCELLED_WHILE_PARKED


@pytest.fixture
def gateway():
    server = FakeGatewayServer().start()
    yield server
    server.stop()


# -- a cancel at every millisecond -----------------------------------------------------------------
@pytest.mark.parametrize("kind", PARKING)
def test_a_cancel_each_millisecond_after_the_create_ends_every_run_cancelled(client, cluster, kind):
    start = PARKING[kind](client, cluster)
    applied = cluster.applied()
    cancel_each_millisecond(client, start)
    assert cluster.applied() == applied  # no cancelled run applied anything


def test_a_cancel_each_millisecond_after_the_create_ends_every_prompt_cancelled(
    make_app, cluster, gateway
):
    client = make_app(overrides={"integrations": ai_integrations(cluster, gateway)}).test_client()
    cancel_each_millisecond(client, prompts(client, gateway))
    assert cluster.calls == []


# -- the instant that was lost, deterministically --------------------------------------------------
class CancelInside:
    """Once armed, cancels the one task its app runs (through the API) from inside the
    integration call it is made part of; the call then goes on as if nothing happened, so the
    run's next writes (its park) come with the abort already fired."""

    def __init__(self):
        self.app = None
        self.armed = False
        self.answers: list[int] = []

    def __call__(self) -> None:
        if self.armed:
            (task_id,) = self.app.extensions["engine"].runs
            answer = self.app.test_client().post(f"/api/v1/tasks/{task_id}/cancel")
            self.answers.append(answer.status_code)


class CancellingGateway:
    """The real gateway client; `cancel_inside` runs once an answer has streamed whole, before
    the runner reads its end."""

    def __init__(self, inner: GatewayClient, cancel_inside: CancelInside):
        self.inner, self.cancel_inside = inner, cancel_inside

    def stream_chat(self, messages, *, session_id, abort):
        yield from self.inner.stream_chat(messages, session_id=session_id, abort=abort)
        self.cancel_inside()


def ai_integrations(cluster, gateway, cancel_inside=None) -> Integrations:
    client = GatewayClient(gateway.url, "fake-model", "gw-key", retries=0, idle_timeout_s=10)
    return Integrations(
        cluster=lambda kubeconfig: cluster,
        cluster_label="fake",
        devbox=FakeDevbox(),
        gateway=client if cancel_inside is None else CancellingGateway(client, cancel_inside),
    )


def assert_acknowledged(client, task: dict, cancel_inside: CancelInside) -> None:
    _, ending = cancelled(client, task["id"])
    assert cancel_inside.answers == [200]
    assert ending == ACKNOWLEDGED  # the park was refused; the run acknowledged the cancel
    moves = [
        (e["payload"]["from"], e["payload"]["to"])
        for e in events(client, task["id"])
        if e["kind"] == "status"
    ]
    assert ("running", "blocked") not in moves


@pytest.mark.parametrize("kind", PARKING)
def test_a_cancel_inside_the_last_call_before_the_park_ends_the_run_cancelled(
    make_app, cluster, kind
):
    """The direct and template runners park right after they are handed the cluster: the
    cancel is recorded in that call, the abort fires, and no later call of theirs looks."""
    inside = CancelInside()

    def cluster_of(kubeconfig):
        inside()
        return cluster

    inside.app = make_app(
        overrides={"integrations": Integrations(cluster=cluster_of, cluster_label="fake")}
    )
    client = inside.app.test_client()
    start = PARKING[kind](client, cluster)
    inside.armed = True
    assert_acknowledged(client, start(), inside)


def test_a_cancel_inside_the_answer_asking_for_inputs_ends_the_prompt_cancelled(
    make_app, cluster, gateway
):
    inside = CancelInside()
    inside.app = make_app(overrides={"integrations": ai_integrations(cluster, gateway, inside)})
    client = inside.app.test_client()
    inside.armed = True
    assert_acknowledged(client, prompts(client, gateway)(), inside)


# -- a cancel pending on a task no run holds ------------------------------------------------------
@pytest.mark.parametrize("status", sorted(ACTIVE))
def test_an_overdue_cancel_ends_the_task_cancelled_whatever_its_status(
    client, runtime, insert_task, sql_conn, status
):
    """On a pinned clock: not a microsecond early, then cancelled with the table's verdict."""
    t = sql_conn.execute("SELECT now() AS now").fetchone()["now"]
    far = t + timedelta(days=1)  # a live lease, never expired here: only the cancel is overdue
    leased = {"lease_expires_at": far} if status in ("running", "applying") else {}
    task_id = insert_task(status=status, created_at=t, cancel_requested_at=t, **leased)["id"]
    due = t + timedelta(seconds=runtime.settings.cancel_ack_deadline_s)

    assert sum(runtime.reaper.sweep(now=due).values()) == 0
    assert snapshot(client, task_id)["status"] == status
    assert runtime.reaper.sweep(now=due + timedelta(microseconds=1))["cancel_deadline"] == 1
    snap = snapshot(client, task_id)
    assert (snap["status"], snap["finishedAt"] is not None) == ("cancelled", True)
    last = [e["payload"] for e in events(client, task_id) if e["kind"] == "status"][-1]
    assert (last["from"], last["verdict"], last["reason"], last["by"]) == (
        status,
        TRANSITIONS[(Status(status), Status.CANCELLED)],
        "cancel_deadline",
        "reaper",
    )


def test_an_input_submission_never_resumes_a_task_whose_cancel_is_pending(
    client, runtime, insert_task, sql_conn, cluster
):
    t = sql_conn.execute("SELECT now() AS now").fetchone()["now"]
    task = insert_task(
        status="blocked",
        cancel_requested_at=t,
        artifact_summary={"pendingInputs": [{"name": "REGION", "type": "string"}]},
    )
    answer = client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"REGION": "eu"}})
    assert answer.status_code == 409 and answer.get_json()["code"] == "task_not_blocked"
    assert answer.get_json()["snapshot"]["cancelRequestedAt"] is not None
    assert runtime.runs == {} and cluster.calls == []
    assert snapshot(client, task["id"])["status"] == "blocked"
    late = t + timedelta(seconds=runtime.settings.cancel_ack_deadline_s + 1)
    assert runtime.reaper.sweep(now=late)["cancel_deadline"] == 1
    assert snapshot(client, task["id"])["status"] == "cancelled"
