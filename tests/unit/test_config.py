"""Settings: one definition, checked at boot, and docs/configuration.md's tables generated from
it."""

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from engine.operations import setting_rules, settings_readme
from engine.operations.config import DEFINITIONS, ConfigurationError, Settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"


def from_env(monkeypatch, **env) -> Settings:
    for name in [n for n in os.environ if n.lower() in DEFINITIONS]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


def test_every_field_is_a_defined_setting_and_the_defaults_pass_their_checks():
    assert {f.name for f in fields(Settings)} - set(DEFINITIONS) == {"overrides"}
    assert Settings().problems() == []
    for definition in DEFINITIONS.values():
        assert definition.rule.doc and "\n" not in definition.rule.doc, definition.name
        assert definition.rule.group in setting_rules.GROUPS, definition.name
        if definition.rule.below:
            assert definition.rule.below in DEFINITIONS, definition.name


def test_the_configuration_page_holds_the_generated_settings_tables():
    assert settings_readme.CONFIGURATION_PAGE == CONFIGURATION_PAGE  # what the command rewrites
    text = CONFIGURATION_PAGE.read_text()
    # Regenerate with: python -m engine.operations.settings_readme
    assert settings_readme.readme_with_tables(text) == text
    for definition in DEFINITIONS.values():
        row = f"| `{definition.variable}` | {definition.default_shown()} | {definition.allowed()} |"
        assert text.count(row) == 1, row


def test_a_configuration_row_that_drifts_is_found():
    text = CONFIGURATION_PAGE.read_text()
    drifted = text.replace("| `RETENTION_DAYS` | `30` | >= 1 |", "| `RETENTION_DAYS` | `30` | |")
    assert drifted != text  # the control: the row is there to drift
    assert settings_readme.readme_with_tables(drifted) != drifted


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RETENTION_DAYS": "0"}, "RETENTION_DAYS=0 is out of range (allowed: >= 1)"),
        ({"RETENTION_DAYS": "-3"}, "RETENTION_DAYS=-3 is out of range (allowed: >= 1)"),
        ({"LEASE_TTL_S": "0"}, "LEASE_TTL_S=0 is out of range (allowed: > 0)"),
        ({"REAPER_INTERVAL_S": "-1"}, "REAPER_INTERVAL_S=-1 is out of range (allowed: > 0)"),
        (
            {"LEASE_TTL_S": "10", "LEASE_RENEW_INTERVAL_S": "10"},
            "LEASE_RENEW_INTERVAL_S=10 is out of range (allowed: > 0, < `LEASE_TTL_S`)",
        ),
        (
            {"SHUTDOWN_GRACE_S": "40"},
            "SHUTDOWN_GRACE_S=40 is out of range (allowed: >= 0, < `GRACEFUL_TIMEOUT`)",
        ),
        (
            # The drain's wait and the grace after it end inside gunicorn's graceful timeout.
            {"DRAIN_WAIT_S": "20", "SHUTDOWN_GRACE_S": "3", "GRACEFUL_TIMEOUT": "23"},
            "DRAIN_WAIT_S=20 is out of range "
            "(allowed: >= 0, < `GRACEFUL_TIMEOUT` - `SHUTDOWN_GRACE_S`)",
        ),
        (
            {"RUNNER_DB_SLOTS": "20"},
            "RUNNER_DB_SLOTS=20 is out of range (allowed: >= 0, < `DB_POOL_SIZE`)",
        ),
        ({"PORT": "70000"}, "PORT=70000 is out of range (allowed: >= 1, <= 65535)"),
        ({"PORT": "eighty"}, "PORT='eighty' is not an integer"),
        ({"LEASE_TTL_S": "1m"}, "LEASE_TTL_S='1m' is not a number"),
        ({"KUBE_ALLOW_HTTP": "maybe"}, "KUBE_ALLOW_HTTP='maybe' is not true or false"),
        ({"AUTH_MODE": "ldap"}, "AUTH_MODE='ldap' is out of range (allowed: `dev`, `oidc`)"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT='xml' is out of range (allowed: `text`, `json`)"),
    ],
)
def test_a_value_out_of_range_stops_with_the_variable_and_its_range(monkeypatch, env, message):
    with pytest.raises(ConfigurationError) as refused:
        from_env(monkeypatch, **env)
    assert message in str(refused.value)


def test_every_bad_variable_is_named_at_once(monkeypatch):
    with pytest.raises(ConfigurationError) as refused:
        from_env(monkeypatch, RETENTION_DAYS="0", MAX_RUN_S="0")
    assert "RETENTION_DAYS=0" in str(refused.value) and "MAX_RUN_S=0" in str(refused.value)


def test_values_in_range_are_read_with_their_types(monkeypatch):
    settings = from_env(
        monkeypatch,
        RETENTION_DAYS="1",
        LEASE_TTL_S="5",
        LEASE_RENEW_INTERVAL_S="1.5",
        SANDBOX_NEVER_READY="yes",
        LOG_LEVEL="debug",
        DATABASE_URL="postgresql://db/x",
    )
    assert (settings.retention_days, settings.lease_ttl_s) == (1.0, 5.0)
    assert settings.lease_renew_interval_s == 1.5 and settings.sandbox_never_ready is True
    assert settings.log_level == "DEBUG" and settings.database_url == "postgresql://db/x"
    # Tests may go outside the ranges on purpose (a loop switched off), never the environment.
    assert Settings.from_env(lease_renew_interval_s=3600.0).lease_renew_interval_s == 3600.0


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "app.py"],
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--check-config", "wsgi:app"],
    ],
    ids=["app.py", "gunicorn"],
)
def test_both_entry_points_refuse_to_boot_with_one_line(argv):
    env = {k: v for k, v in os.environ.items() if k.lower() not in DEFINITIONS}
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env={**env, "RETENTION_DAYS": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "configuration error: RETENTION_DAYS=0 is out of range (allowed: >= 1)" in done.stderr, (
        done.stderr[-2000:]
    )
