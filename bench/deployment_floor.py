"""The database floor of a deployment: its own statements alone, as fast as they go.

A deployment commits five statements (BENCHMARKS.md names each and why it must exist): its insert,
its claim, two fenced status moves that carry the run's steps around them (applying, completed)
and one fenced write per resource applied before the last (the last one's end rides on the move
to completed when the workloads are ready at the first look). Here they run with nothing else:
no HTTP, no request handling, no runner between them, no cluster. Whatever the service does
besides its statements only adds CPU to a deployment, so the CPU-bound rate here (the machine's
cores over the client's and the server's CPU per deployment) is the ceiling of end-to-end
deployments/s on this machine with these statements. (The wall-clock rate is one process's: the
service has two workers.)

The statements are recorded from one real image deployment (the app in process, the sandbox
cluster at zero delays), then replayed per deployment with its own task id by closed-loop
clients (greenlets on one engine pool, as a worker's runners share theirs), in the engine's own
way: `Database` runs each named query, and the process's runner notices announce the tasks
once per tick, as in production.

`python -m bench.deployment_floor` prints it, on e2e_throughput's server (it no longer runs
inside e2e_throughput, whose peers are now same-work services over HTTP).
"""

from bench.common import fresh_database, median  # noqa: I001  (patches first)

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from uuid import UUID, uuid4  # noqa: E402

import gevent  # noqa: E402

from engine.operations.config import Settings  # noqa: E402
from engine.db import Database  # noqa: E402
from engine.core.notices import RunnerNotices  # noqa: E402

#: The statements of a deployment (every other statement it caused was a read, or not its own).
WRITES = ("task_insert", "task_transition", "task_transition_moved", "task_write_if_held")
SOURCE = {"kind": "image", "image": "nginx:1.27", "name": "web", "port": 80}
#: Deployments replayed at once: as many as procrastinate's worker runs jobs (bench/peers/).
CLIENTS = 16


def record(admin: str | None = None) -> list[tuple[str, dict]]:
    """The writes of one image deployment, in order, as the engine made them: (query, params)."""
    from app import create_app

    with fresh_database(admin) as url:
        app = create_app(
            {
                "database_url": url,
                "sandbox_apply_delay_s": 0.0,
                "sandbox_ready_delay_s": 0.0,
                "readiness_poll_s": 0.05,
            }
        )
        runtime = app.extensions["engine"]
        calls: list[tuple[str, dict]] = []
        run = runtime.db._run

        def recording(name, params, result, abort, retry_until):
            calls.append((name, dict(params)))
            return run(name, params, result, abort, retry_until)

        # Observed, not changed: the wrapper hands every call on as it came.
        runtime.db._run = recording
        try:
            client = app.test_client()
            response = client.post("/api/v1/tasks", json={"projectId": "bench", "source": SOURCE})
            assert response.status_code == 201, response.get_json()
            task_id = response.get_json()["id"]
            deadline = time.monotonic() + 60
            while client.get(f"/api/v1/tasks/{task_id}").get_json()["status"] != "completed":
                assert time.monotonic() < deadline, "the recorded deployment did not complete"
                time.sleep(0.02)
        finally:
            runtime.shutdown()
            runtime.db.close()
    script = [(name, params) for name, params in calls if name in WRITES]
    # The insert is the first; every later write names the task it created.
    assert script and script[0][0] == "task_insert", script
    named = (task_id, "{" + task_id + "}")
    mine = [(n, p) for n, p in script[1:] if str(p.get("task_id", p.get("task_ids"))) in named]
    assert len(mine) == len(script) - 1, "a write of another task was recorded"
    return script


def _as_task(params: dict, task_id: UUID) -> dict:
    """A recorded write's parameters, for the task `task_id` (its epoch is the claim's, 1)."""
    mine = dict(params)
    if "task_id" in mine:
        mine["task_id"] = task_id
    if "task_ids" in mine:
        mine["task_ids"] = "{" + str(task_id) + "}"
    return mine


def replay(db: Database, notices: RunnerNotices, script, clients: int, count: int, server_cpu):
    """`count` deployments' statements by `clients` closed-loop clients on `db`'s pool: the
    deployments/s, and the CPU per deployment (ms) of this process and of the PostgreSQL server
    (`server_cpu()`: its CPU seconds so far)."""
    (_, insert), rest = script[0], script[1:]
    left = [count]

    def deploy():
        task_id = uuid4()  # each replay its own task
        assert db.one("task_insert", **{**insert, "id": task_id})
        for name, params in rest:
            moved = db.all(name, **_as_task(params, task_id))
            assert moved, f"{name} wrote nothing: the replay is not the deployment"
            notices.changed(insert["workspace"], insert["project_id"], task_id)

    def client():
        while left[0] > 0:
            left[0] -= 1
            deploy()

    cpu, server, started = time.process_time(), server_cpu(), time.perf_counter()
    gevent.joinall([gevent.spawn(client) for _ in range(clients)], raise_error=True)
    seconds = time.perf_counter() - started
    cpu, server = time.process_time() - cpu, server_cpu() - server
    return {
        "rate": count / seconds,
        "client_cpu_ms": cpu * 1000 / count,
        "postgres_cpu_ms": server * 1000 / count,
    }


def measure(admin: str | None, clients: int, count: int, runs: int, server_cpu) -> dict:
    """Medians over `runs` (each on a fresh database) of `replay`, the CPU-bound rate (the
    machine's cores over the CPU of a deployment), and the statements replayed."""
    script = record(admin)
    measured = []
    for _ in range(runs):
        with fresh_database(admin) as url:
            db = Database(url, max_size=clients + 2)
            db.open()
            notices = RunnerNotices(db, interval_s=Settings().runner_notice_interval_s)
            notices.start()
            try:
                # Warm-up on the same pool: its connections prepare the statements.
                replay(db, notices, script, clients, count // 4, server_cpu)
                measured.append(replay(db, notices, script, clients, count, server_cpu))
            finally:
                notices.stop()
                db.close()
    floor = {key: median([m[key] for m in measured]) for key in measured[0]}
    cores = os.cpu_count() or 1
    floor["cpu_bound_rate"] = median(
        [cores * 1000 / (m["client_cpu_ms"] + m["postgres_cpu_ms"]) for m in measured]
    )
    return {
        **floor,
        "clients": clients,
        "rates": [m["rate"] for m in measured],
        "statements": [name for name, _ in script],
    }


def summary(floor: dict) -> str:
    return (
        f"{floor['rate']:.0f} deployments/s with {floor['clients']} clients "
        f"({', '.join(f'{r:.0f}' for r in floor['rates'])}); CPU per deployment: "
        f"{floor['client_cpu_ms']:.2f} ms of the client, {floor['postgres_cpu_ms']:.2f} ms of "
        f"PostgreSQL; CPU-bound {floor['cpu_bound_rate']:.0f}/s; "
        f"{len(floor['statements'])} statements: {', '.join(floor['statements'])}"
    )


if __name__ == "__main__":
    from bench.e2e_servers import admin_url, postgres_cpu_seconds

    admin, _ = admin_url()
    count = int(os.environ.get("BENCH_FLOOR_DEPLOYMENTS", "1000"))
    print(summary(measure(admin, CLIENTS, count, 3, lambda: postgres_cpu_seconds(admin))))
    sys.exit(0)
