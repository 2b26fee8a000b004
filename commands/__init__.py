"""Operator commands: `flask --app wsgi <group> <command>` (README, "Operating the schema" and
"Operating")."""

from flask import Flask

from commands import db, operate


def init_app(app: Flask) -> None:
    app.cli.add_command(db.group)
    operate.init_app(app)
