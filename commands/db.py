"""`flask --app wsgi db status|upgrade`: the schema migrations of the configured database."""

import json

import click
from flask import current_app
from flask.cli import AppGroup

from engine.operations import migrations

group = AppGroup("db", help="Schema migrations (migrations/NNNN_name.sql).")


def _url() -> str:
    return current_app.extensions["database_url"]


@group.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per migration.")
def status(as_json: bool) -> None:
    """List every migration as applied, adopted or pending; exit 1 when some are pending."""
    states = migrations.status(_url())
    for s in states:
        state = (
            "unknown"
            if s.unknown
            else "adopted"
            if s.adopted
            else "applied"
            if s.applied_at
            else "pending"
        )
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "version": s.version,
                        "name": s.name,
                        "state": state,
                        "appliedAt": s.applied_at.isoformat() if s.applied_at else None,
                    }
                )
            )
        else:
            when = s.applied_at.isoformat(timespec="seconds") if s.applied_at else "-"
            click.echo(f"{s.version:04d}  {s.name:<32} {state:<8} {when}")
    if any(s.applied_at is None for s in states):
        raise SystemExit(1)


@group.command("upgrade")
def upgrade() -> None:
    """Apply every pending migration, in numeric order."""
    applied = migrations.upgrade(_url())
    for m in applied:
        click.echo(f"applied {m.version:04d}_{m.name}")
    if not applied:
        click.echo("database is current")
