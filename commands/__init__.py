"""Operator commands: `flask --app wsgi <group> <command>` (README, "Operating the schema")."""
from flask import Flask

from commands import db


def init_app(app: Flask) -> None:
    app.cli.add_command(db.group)
