"""An integrator's flow through the client openapi-python-client generated from the document.

Run by test_generated_client.py with the plain interpreter (httpx on threads, not in the gevent-
patched test process): `python generated_client_flow.py <dir holding engine_client> <base URL>
<base64 kubeconfig>`. Every call goes through the generated package, with its typed models only;
what each step saw (read from the parsed models) is printed as one JSON object for the test to
judge. A body that does not parse into its documented model stops the flow with the reason.
"""

import json
import sys
import time
import uuid
from datetime import datetime

sys.path.insert(0, sys.argv[1])

import httpx  # noqa: E402
from engine_client import Client  # noqa: E402
from engine_client.api.tasks import cancel_task, create_task, get_task, list_tasks  # noqa: E402
from engine_client.models import (  # noqa: E402
    CreateTaskNewTask,
    CreateTaskNewTaskContainerImage,
    CreateTaskNewTaskContainerImageKind,
    CreateTaskRedeploy,
    GetTaskWaitFor,
    Task,
    TaskPage,
    WaitedTask,
    WaitedTaskWaitOutcome,
)

BASE, KUBECONFIG = sys.argv[2], sys.argv[3]
PROJECT = "generated-client"
#: The sandbox never reports this image ready: its task runs until it is cancelled.
NEVER_READY = "nginx:sandbox-never-ready"
WAIT_S = 60.0


def parsed(response, model):
    """The response's body as the generated `model`; exit naming what came instead."""
    if not isinstance(response.parsed, model):
        sys.exit(
            f"HTTP {response.status_code}: expected {model.__name__}, parsed "
            f"{type(response.parsed).__name__}: {response.content[:1000]!r}"
        )
    return response.parsed


def create(client, body) -> Task:
    answer = create_task.sync_detailed(
        client=client, body=body, idempotency_key=str(uuid.uuid4()), x_kubeconfig=KUBECONFIG
    )
    return parsed(answer, Task)


def image(name: str) -> CreateTaskNewTaskContainerImage:
    return CreateTaskNewTaskContainerImage(
        kind=CreateTaskNewTaskContainerImageKind.IMAGE, image=name, name="web", port=80
    )


def wait(client, task_id) -> WaitedTask:
    """The task once it ends (or blocks), through the document's long-poll read."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = get_task.sync_detailed(
            task_id, client=client, wait_for=GetTaskWaitFor.TERMINAL, timeout=10
        )
        task = parsed(answer, WaitedTask)
        if task.wait_outcome != WaitedTaskWaitOutcome.TIMEOUT or time.monotonic() > deadline:
            return task


def seen(task) -> dict:
    """What the test checks of a parsed task: its model, status (an enum of the model) and ids."""
    return {
        "model": type(task).__name__,
        "statusType": type(task.status).__name__,
        "status": task.status.value,
        "id": str(task.id),
        "projectId": task.project_id,
        "image": task.source.additional_properties.get("image"),
        # A timestamp the model parsed (a string would mean its format went undocumented).
        "cancelRequested": isinstance(task.cancel_requested_at, datetime),
        "retriedFrom": str(task.retried_from_task_id) if task.retried_from_task_id else None,
        "waitOutcome": getattr(task, "wait_outcome", None) and task.wait_outcome.value,
    }


def main() -> dict:
    client = Client(base_url=BASE, timeout=httpx.Timeout(30.0), raise_on_unexpected_status=True)
    with client:
        first = create(client, CreateTaskNewTask(project_id=PROJECT, source=image("nginx:1.27")))
        done = wait(client, first.id)
        page = parsed(list_tasks.sync_detailed(client=client, project_id=PROJECT), TaskPage)
        second = create(client, CreateTaskNewTask(project_id=PROJECT, source=image(NEVER_READY)))
        cancelled = parsed(cancel_task.sync_detailed(second.id, client=client), Task)
        settled = wait(client, second.id)
        # The redeploy names only its predecessor: the same project and source, a new task.
        redeploy = create(client, CreateTaskRedeploy(predecessor_task_id=second.id))
        parsed(cancel_task.sync_detailed(redeploy.id, client=client), Task)  # it never gets ready
        return {
            "created": seen(first),
            "waited": seen(done),
            "listed": [seen(task) for task in page.items],
            "cancelled": seen(cancelled),
            "cancelledSettled": seen(settled),
            "redeploy": seen(redeploy),
            "redeploySettled": seen(wait(client, redeploy.id)),
        }


if __name__ == "__main__":
    print(json.dumps(main()))
