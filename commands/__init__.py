"""Operator commands: `flask --app wsgi <group> <command>` (docs/operating.md, "Operator
commands" and "Schema migrations")."""

from flask import Flask

from commands import db, operate


def init_app(app: Flask) -> None:
    app.cli.add_command(db.group)
    operate.init_app(app)
