"""Operator commands on tasks, cleanup jobs and streaks: `flask --app wsgi <command>`
(docs/operating.md, "Operator commands"). The schema's are in commands/db.py.

Readable tables by default, `--json` for scripts. Exit codes: 0 done (and, for `streaks` and
`db status`, nothing wrong); 1 something needs attention (a current streak, a pending migration,
a reconciliation error); 3 not found; 4 not allowed from the current state (a finished task, a
job that has not failed).
"""

import json
import sys
from uuid import UUID

import click
from flask import Flask, current_app
from flask.cli import AppGroup, with_appcontext

from engine import errors
from engine.cleanup.jobs import JobState
from engine.core.status import Status
from engine.errors import DomainError
from engine.lifecycle import operator as operations

EXIT_ATTENTION = 1
EXIT_NOT_FOUND = 3
EXIT_NOT_ALLOWED = 4
#: The exit code of each domain error; a subclass not listed takes its nearest listed base's.
#: The API's table (blueprints/errors.py) is the HTTP side of the same errors: what it answers 404
#: exits EXIT_NOT_FOUND here (tests/unit/test_invariants.py holds the two together).
EXIT_CODES: dict[type[DomainError], int] = {
    DomainError: EXIT_NOT_ALLOWED,
    errors.TaskNotFound: EXIT_NOT_FOUND,
    errors.PredecessorNotFound: EXIT_NOT_FOUND,
    errors.UnknownTemplate: EXIT_NOT_FOUND,
    errors.AppNotFound: EXIT_NOT_FOUND,
    operations.CleanupJobNotFound: EXIT_NOT_FOUND,
}

tasks_cli = AppGroup("tasks", help="Look at and cancel tasks of any workspace.")
jobs_cli = AppGroup("cleanup-jobs", help="Look at and retry durable cleanup jobs.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
limit_option = click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))


def any_of(flag: str, dest: str, values) -> click.Option:
    """A repeatable filter option: rows whose value is any of those given."""
    return click.option(
        flag, dest, multiple=True, type=click.Choice([v.value for v in values]), help="Repeatable."
    )


def runtime():
    return current_app.extensions["engine"]


def emit(data, as_json: bool, columns: list[tuple[str, str]] | None = None) -> None:
    """JSON, or a table of `columns` ((key, heading) pairs) for a list of dicts."""
    if as_json or columns is None:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    rows = [[_cell(item.get(key)) for key, _ in columns] for item in data]
    headings = [heading for _, heading in columns]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headings)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headings, widths, strict=False)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
    if not rows:
        click.echo("(none)")


def _cell(value) -> str:
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:79] + "…"


def exit_code(exc: DomainError) -> int:
    """The exit code a command ends with on `exc`."""
    return next(EXIT_CODES[cls] for cls in type(exc).__mro__ if cls in EXIT_CODES)


def fail(exc: DomainError) -> None:
    """A domain error as a message on stderr and its exit code."""
    click.echo(f"error: {exc.message}", err=True)
    sys.exit(exit_code(exc))


def perform(operation, *args):
    """`operation(runtime, *args)`; a domain error ends the command (fail)."""
    try:
        return operation(runtime(), *args)
    except DomainError as exc:
        fail(exc)


TASK_COLUMNS = [
    ("id", "ID"),
    ("workspace", "WORKSPACE"),
    ("projectId", "PROJECT"),
    ("status", "STATUS"),
    ("sourceKind", "KIND"),
    ("createdAt", "CREATED"),
]
EVENT_COLUMNS = [("seq", "SEQ"), ("at", "AT"), ("kind", "KIND"), ("payload", "PAYLOAD")]


@tasks_cli.command("list")
@any_of("--status", "statuses", Status)
@click.option(
    "--workspace",
    "--namespace",
    "workspace",
    help="Only this workspace (--namespace: its old name, still accepted).",
)
@click.option("--project")
@limit_option
@json_option
def tasks_list(statuses, workspace, project, limit, as_json):
    """The newest tasks across workspaces."""
    items = operations.list_tasks(
        runtime(), workspace=workspace, project_id=project, statuses=list(statuses), limit=limit
    )
    for item in items:
        item["sourceKind"] = item["source"].get("kind")
    emit(items, as_json, TASK_COLUMNS)


@tasks_cli.command("show")
@click.argument("task_id", type=click.UUID)
@json_option
def tasks_show(task_id: UUID, as_json):
    """A task's snapshot, its events, and the explanation chat gives."""
    shown = perform(operations.show_task, task_id)
    if as_json:
        emit(shown, True)
        return
    snap, explanation = shown["snapshot"], shown["explanation"]
    click.echo(
        f"{snap['id']}  {snap['status']}  workspace {snap['workspace']}  "
        f"project {snap['projectId']}"
    )
    click.echo(explanation["summary"])
    for step in explanation.get("nextSteps") or []:
        click.echo(f"next: {step}")
    click.echo("")
    emit(
        [
            {
                "seq": e["seq"],
                "kind": e["kind"],
                "at": e["createdAt"],
                "payload": json.dumps(e["payload"], default=str),
            }
            for e in shown["events"]
        ],
        False,
        EVENT_COLUMNS,
    )


@tasks_cli.command("cancel")
@click.argument("task_id", type=click.UUID)
@json_option
def tasks_cancel(task_id: UUID, as_json):
    """Cancel a task (the same two-phase cancel a user's request makes)."""
    snap = perform(operations.cancel_task, task_id)
    if as_json:
        emit(snap, True)
    else:
        pending = (
            " (cancel requested; the runner acknowledges it)"
            if snap["status"] not in ("cancelled",)
            else ""
        )
        click.echo(f"{snap['id']}  {snap['status']}{pending}")


JOB_COLUMNS = [
    ("id", "ID"),
    ("trigger", "TRIGGER"),
    ("state", "STATE"),
    ("attempts", "ATTEMPTS"),
    ("taskId", "TASK"),
    ("nextAttemptAt", "NEXT ATTEMPT"),
    ("lastError", "LAST ERROR"),
]


@jobs_cli.command("list")
@any_of("--state", "states", JobState)
@limit_option
@json_option
def jobs_list(states, limit, as_json):
    """The newest cleanup jobs."""
    emit(
        operations.list_cleanup_jobs(runtime(), states=list(states), limit=limit),
        as_json,
        JOB_COLUMNS,
    )


@jobs_cli.command("retry")
@click.argument("job_id", type=int)
@json_option
def jobs_retry(job_id: int, as_json):
    """Give a job that failed for good a fresh attempt budget (recorded as a task event)."""
    job = perform(operations.retry_cleanup_job, job_id)
    if as_json:
        emit(job, True)
    else:
        click.echo(
            f"cleanup job {job['id']} ({job['trigger']}) is {job['state']} again, "
            f"with a fresh budget of attempts"
        )


STREAK_COLUMNS = [
    ("subject", "SUBJECT"),
    ("consecutiveFailures", "FAILURES"),
    ("firstFailureAt", "SINCE"),
    ("lastFailureAt", "LAST"),
    ("lastError", "LAST ERROR"),
]


@click.command("streaks")
@json_option
@with_appcontext
def streaks(as_json):
    """What keeps failing right now (exit 1 when anything is)."""
    items = operations.list_streaks(runtime())
    emit(items, as_json, STREAK_COLUMNS)
    if items:
        sys.exit(EXIT_ATTENTION)


RECONCILE_COLUMNS = [
    ("kind", "KIND"),
    ("liveness", "LIVENESS"),
    ("disposition", "DISPOSITION"),
    ("count", "COUNT"),
]


@click.command("reconcile")
@json_option
@with_appcontext
def reconcile(as_json):
    """Run startup reconciliation of this host's runtime rows now (exit 1 on any error)."""
    summary = operations.reconcile(runtime())
    if as_json:
        emit(summary, True)
    else:
        click.echo(
            f"host {summary['host']}: {summary['rows']} row(s)"
            f"{' (truncated)' if summary['truncated'] else ''}"
        )
        emit(summary["counts"], False, RECONCILE_COLUMNS)
    if any(c["disposition"] == "error" for c in summary["counts"]):
        sys.exit(EXIT_ATTENTION)


def init_app(app: Flask) -> None:
    for command in (tasks_cli, jobs_cli, streaks, reconcile):
        app.cli.add_command(command)
