"""Pure helpers of the operator's side: credential redaction, request ids, bounded labels, the
JSON log line."""

import json
import logging
import subprocess
import sys

import pytest

from engine.operations.logs import JsonFormatter, QuietAccessFilter, TextFormatter, request_id_from
from engine.operations.streaks import subject_kind
from engine.trust.secrets import redact_credentials


@pytest.mark.parametrize(
    "text, secret",
    [
        ("connect to postgresql://app:hunter2hunter@db:5432/x failed", "hunter2hunter"),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig-sig-sig",
            "eyJhbGciOiJIUzI1NiJ9.e30.sig",
        ),
        ("retry with password=s3cr3t-value&user=x", "s3cr3t-value"),
        ('{"api_key": "sk-live-123456"}', "sk-live-123456"),
    ],
)
def test_credential_shapes_are_redacted(text, secret):
    assert secret in text  # control: the needle is there before
    assert secret not in redact_credentials(text)


def test_ordinary_text_is_left_alone():
    text = "devbox API unreachable: ConnectionError (http://devbox:8080/v1) after 3 tries"
    assert redact_credentials(text) == text


def test_request_ids_are_kept_only_when_well_formed():
    assert request_id_from("abc-123_x.y:z") == "abc-123_x.y:z"
    for bad in (None, "", "has space", "a\nb", "x" * 129, "-leading-dash", "ü"):
        fresh = request_id_from(bad)
        assert fresh != bad and len(fresh) == 32


def test_subject_kinds_are_bounded():
    assert subject_kind("integration:cluster:tenant-a") == "integration:cluster"
    assert subject_kind("cleanup:devbox_pause") == "cleanup:devbox_pause"
    assert subject_kind("reaper") == "reaper"


def record(message, *args, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("engine.test", logging.WARNING, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_a_json_line_is_one_object_with_context_and_structured_fields():
    line = JsonFormatter().format(
        record(
            "task %s failed\nhard",
            "t-1",
            request_id="r-1",
            task_id="t-1",
            workspace="default",
            consecutiveFailures=3,
        )
    )
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "WARNING" and parsed["logger"] == "engine.test"
    assert parsed["message"] == "task t-1 failed\nhard"
    assert (parsed["request_id"], parsed["task_id"], parsed["workspace"]) == (
        "r-1",
        "t-1",
        "default",
    )
    assert parsed["consecutiveFailures"] == 3 and parsed["time"].endswith("+00:00")


def test_text_lines_name_the_context_and_redact_credentials():
    line = TextFormatter().format(record("dsn postgresql://u:pw123456@h/db", request_id="r-9"))
    assert "request_id=r-9" in line and "pw123456" not in line


@pytest.mark.parametrize(
    "logger", ["blueprints.auth", "engine.trust.secrets", "authlib", "app.password_reset"]
)
def test_a_logger_named_like_a_secret_keeps_its_line_and_a_secret_is_still_redacted(logger):
    """A text line's head ("<logger>: ") read as `auth: <value>` and lost the message's first
    word (blueprints.auth: [redacted] refused)."""

    def formatted(message, *args):
        rec = logging.LogRecord(logger, logging.INFO, __file__, 1, message, args, None)
        text = TextFormatter().format(rec)
        return text, json.loads(JsonFormatter().format(rec))

    text, parsed = formatted("sign-in refused: %s", "InvalidToken")
    assert text.endswith(f" INFO {logger}: sign-in refused: InvalidToken"), text
    assert (parsed["logger"], parsed["message"]) == (logger, "sign-in refused: InvalidToken")
    # The message is still redacted, and so is a traceback.
    text, parsed = formatted("token: %s password=%s", "s3cr3t-value", "hunter2hunter")
    assert text.endswith(f" INFO {logger}: token: [redacted] password=[redacted]"), text
    assert parsed["message"] == "token: [redacted] password=[redacted]"  # and still JSON
    fields = {"token": "s3cr3t-value", "upstream": {"password": ["hunter2hunter"], "port": 5}}
    parsed = json.loads(JsonFormatter().format(record("x", **fields)))
    assert (parsed["token"], parsed["upstream"]) == (
        "[redacted]",
        {"password": "[redacted]", "port": 5},
    )
    try:
        raise RuntimeError("connect with password=hunter2hunter")
    except RuntimeError:
        rec = record("failed")
        rec.exc_info = sys.exc_info()
    assert "hunter2hunter" not in TextFormatter().format(rec)
    assert "password=[redacted]" in TextFormatter().format(rec)


def test_probe_requests_are_dropped_from_the_access_log():
    quiet = QuietAccessFilter()
    assert not quiet.filter(record("%(U)s", {"U": "/healthz"}))
    assert quiet.filter(record("%(U)s", {"U": "/api/v1/tasks"}))


#: Runs in a process of its own: gunicorn's logger applies the logging config process-wide.
_ACCESS_LINES = """
import runpy, sys
from datetime import timedelta
from types import SimpleNamespace
from gunicorn.config import Config

settings = runpy.run_path("gunicorn.conf.py")
cfg = Config()
cfg.set("logconfig_dict", settings["logconfig_dict"])
cfg.set("accesslog", sys.argv[1] or None)
logger = settings["logger_class"](cfg)
emitted = []
logger.access_log.info = lambda *args: emitted.append(args)
environ = {"REQUEST_METHOD": "GET", "RAW_URI": "/api/v1/tasks", "PATH_INFO": "/api/v1/tasks",
           "SERVER_PROTOCOL": "HTTP/1.1"}
response = SimpleNamespace(status="200 OK", headers=[], sent=2)
logger.access(response, SimpleNamespace(headers=[]), environ, timedelta(milliseconds=3))
print(len(emitted))
"""


@pytest.mark.parametrize("access_log, lines", [("", "0"), ("-", "1")])
def test_gunicorn_builds_access_lines_only_when_access_log_is_set(access_log, lines):
    """gunicorn.conf.py's logger: with ACCESS_LOG unset no line is built (gunicorn builds one per
    request whenever a logging config is given, as ours always is); set, the line is logged."""
    done = subprocess.run(
        [sys.executable, "-c", _ACCESS_LINES, access_log],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split()[-1] == lines, done.stderr
