"""Contract fuzzing: schemathesis drives a real server from its own OpenAPI document.

Every operation (the SSE streams aside: they never end), positive and negative data (the
coverage and fuzzing phases), and stateful sequences along the document's links (create -> read
-> cancel -> redeploy, tool create -> wait / explain / cancel, ...), with EVERY check
schemathesis has. Each write gets its own idempotency key (schemathesis_hooks.py). The verdict is
read from schemathesis's JSON report, not its console: a failure, a warning (mostly rejected
data, repeated 404s), an untested operation or a stateful phase that covers fewer than
MIN_LINK_COVERAGE of the links fails the test. The CLI runs in a process of its own (it is
asyncio/threads, the test process is gevent-patched); FUZZ_EXAMPLES / FUZZ_STEPS scale it up for
`make fuzz`.

Checks that cannot fail against this API, and why (so they are named, not silently skipped):
- ignored_auth, object_level_authorization: the run is in dev auth mode (one local user, no
  credentials to ignore or to swap); OIDC mode's refusals are tested in
  tests/integration/test_auth_bearer.py.
- use_after_free: the API deletes nothing (tasks are purged by retention, not by a DELETE).
- allow_header_conformance: schemathesis applies it to OPTIONS answers only, and none of its
  phases sends OPTIONS here (a 405's Allow is unsupported_method's, which the control breaks).
- missing_required_header: no operation requires a header (X-Kubeconfig is required only where
  the server deploys to real clusters, not in the sandbox this run uses).
The positive control (test_each_check_catches_a_broken_response) proves every other check fails
on a response broken for it.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import requests

from tests.contract.helpers import FAST_SANDBOX, SANDBOX_KUBECONFIG
from tests.helpers import IMAGE_SOURCE, ROOT

#: Checks that cannot fail here (see the module docstring).
INAPPLICABLE = {
    "allow_header_conformance",
    "ignored_auth",
    "object_level_authorization",
    "use_after_free",
    "missing_required_header",
}
#: The checks broken_wsgi.py breaks, one response each (the positive control).
BROKEN = {
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "unsupported_method",
    "ensure_resource_availability",
}
#: The share of the document's links the stateful phases must follow, all suites together.
MIN_LINK_COVERAGE = 0.8
#: The seeds of the runs after the first (seed 14, schemathesis.toml): one stateful suite's
#: reach varies with how the runs it starts happen to end (a task must be completed for a
#: rollback link, blocked for an input link), from 26 to 37 of 38 links.
MORE_SEEDS = (15,)
#: The positive control's seeds, the next only while a check has not failed yet.
CONTROL_SEEDS = (14, 15, 16, 17)


def schemathesis_run(
    base: str, tmp_path: Path, *extra: str, examples: str | None = None, pinned: tuple = ()
):
    """Run the schemathesis CLI against `base`; (completed process, JSON report, ndjson events).
    `pinned`: more (operationId, parameter, value) the run must send as given."""
    examples = examples or os.environ.get("FUZZ_EXAMPLES", "10")
    config = (ROOT / "tests/contract/schemathesis.toml").read_text()
    # Input submission is reached by no link from a create (a task blocks only when its runner
    # asks), and a tool's redeploy takes its task in the body: their coverage and fuzzing phases
    # get a task that exists (a cancelled one, redeployable) instead of 404 after 404.
    existing = requests.post(
        f"{base}/api/v1/tasks",
        json={"projectId": "contract", "source": IMAGE_SOURCE},
        headers={"X-Kubeconfig": SANDBOX_KUBECONFIG},
        timeout=30,
    )
    assert existing.status_code == 201, existing.text
    task_id = existing.json()["id"]
    cancelled = requests.post(f"{base}/api/v1/tasks/{task_id}/cancel", timeout=30)
    assert cancelled.status_code < 500, cancelled.text  # (the control server 404s it)
    pinned = (
        ("submitInputs", "path.task_id", task_id),
        ("redeployDeployment", "body.taskId", task_id),
        *pinned,
    )
    for operation in dict.fromkeys(name for name, _, _ in pinned):
        values = ", ".join(f'"{p}" = {_toml(v)}' for name, p, v in pinned if name == operation)
        config += (
            f'\n[[operations]]\ninclude-operation-id = "{operation}"\nparameters = {{ {values} }}\n'
        )
    # In the file, not on the command line: a CLI --max-examples would override the stateful
    # phase's own (schemathesis.toml), and its scenarios would be as few as one operation's cases.
    config = config.replace("[generation]\n", f"[generation]\nmax-examples = {int(examples)}\n", 1)
    if os.environ.get("FUZZ_STEPS"):
        config = re.sub(r"max-steps = \d+", f"max-steps = {int(os.environ['FUZZ_STEPS'])}", config)
    (tmp_path / "schemathesis.toml").write_text(config)
    argv = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "--no-color",
        "run",
        f"{base}/api/v1/openapi.json",
        "--exclude-tag",
        "streams",
        "--checks",
        "all",
        "-H",
        f"X-Kubeconfig: {SANDBOX_KUBECONFIG}",
        "--report",
        "json,ndjson,junit",
        "--report-dir",
        str(tmp_path),
        *extra,
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **os.environ,
            "SCHEMATHESIS_HOOKS": "tests.contract.schemathesis_hooks",
            "PYTHONPATH": str(ROOT),
        },
        timeout=int(os.environ.get("FUZZ_TIMEOUT", "900")),
    )
    (tmp_path / "stdout.txt").write_text(done.stdout)
    reports = {p.suffix: p for p in tmp_path.iterdir() if p.suffix in (".json", ".ndjson")}
    report = json.loads(reports[".json"].read_text()) if ".json" in reports else {}
    events = (
        [json.loads(line) for line in reports[".ndjson"].read_text().splitlines() if line]
        if ".ndjson" in reports
        else []
    )
    return done, report, events


def test_schemathesis_finds_nothing(start_server, tmp_path):
    server = start_server(env=FAST_SANDBOX)
    done, report, events = schemathesis_run(server.base, tmp_path)
    why = done.stdout[-8000:] + done.stderr[-3000:] + server.output()[-4000:]
    assert report, why
    assert report["failures"] == [], why
    assert report["errors"] == [], why
    assert not any(report["warnings"].values()), (report["warnings"], why)
    assert done.returncode == 0, why
    # Positive control: it did test every operation but the streams, in every phase.
    document = requests.get(f"{server.base}/api/v1/openapi.json", timeout=10).json()
    streams = sum(
        "streams" in op.get("tags", [])
        for path in document["paths"].values()
        for op in path.values()
        if isinstance(op, dict)
    )
    operations = report["operations"]
    assert streams and operations["tested"] == operations["selected"], operations
    assert operations["selected"] == operations["total"] - streams, operations
    for phase in ("coverage", "fuzzing", "stateful"):
        assert report["phases"][phase]["status"] == "success", report["phases"]
    # The whole run again with another seed: a stateful suite ends once schemathesis stops
    # drawing operations that keep answering 404 or 409, some 20 to 40 scenarios in (and a
    # stateful phase alone, without the earlier phases' answers, follows no link at all).
    covered, total = link_coverage(events)
    for seed in MORE_SEEDS:
        workdir = tmp_path / f"seed-{seed}"
        workdir.mkdir()
        more, more_report, more_events = schemathesis_run(server.base, workdir, "--seed", str(seed))
        why = more.stdout[-8000:] + server.output()[-4000:]
        assert more_report["failures"] == [] and more_report["errors"] == [], why
        assert not any(more_report["warnings"].values()), (more_report["warnings"], why)
        assert more.returncode == 0, why
        covered |= link_coverage(more_events)[0]
    assert total and len(covered) / total >= MIN_LINK_COVERAGE, (sorted(covered), total)
    # Every check ran (and passed) somewhere.
    assert set(check_results(events)) >= set(BROKEN) | INAPPLICABLE, check_results(events)


def test_each_check_catches_a_broken_response(start_server, tmp_path):
    """Positive control: on an engine whose responses are broken one per check
    (broken_wsgi.py), every applicable check fails."""
    server = start_server(
        kind="gunicorn", env=FAST_SANDBOX, workers=1, wsgi="tests.contract.broken_wsgi:app"
    )
    # ensure_resource_availability needs a stateful step along a create's CancelTask link (the
    # one operation under /api/v1/tasks whose every parameter a link gives), after a create
    # that succeeded: every create of this run gets a valid target and source, and the run
    # goes again with the next seed while no step has taken that link (one run in four did not).
    creates = (
        ("createTask", "body.projectId", "contract"),
        ("createTask", "body.source", IMAGE_SOURCE),
    )
    failed: set[str] = set()
    for seed in CONTROL_SEEDS:
        workdir = tmp_path / f"seed-{seed}"
        workdir.mkdir()
        done, report, events = schemathesis_run(
            server.base, workdir, "--seed", str(seed), examples="10", pinned=creates
        )
        assert done.returncode != 0, done.stdout[-6000:]
        failed |= {
            name for name, statuses in check_results(events).items() if "failure" in statuses
        }
        if set(BROKEN) <= failed:
            break
    assert set(BROKEN) <= failed, (set(BROKEN) - failed, done.stdout[-6000:])


def _toml(value) -> str:
    """A JSON value as a TOML inline value (strings, numbers and objects of them)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def check_results(events: list[dict]) -> dict[str, set[str]]:
    """check name -> the statuses it had (success, failure, ...) over the whole run."""
    results: dict[str, set[str]] = {}
    for event in events:
        recorder = event.get("ScenarioFinished", {}).get("recorder", {})
        for checks in (recorder.get("checks") or {}).values():
            for check in checks:
                results.setdefault(check["name"], set()).add(check["status"])
    return results


def link_coverage(events: list[dict]) -> tuple[set[str], int]:
    """(links the stateful phase followed, how many it had) from schemathesis's ndjson events: a
    link counts once a step applied it (what the console's "API Links: N covered" counts)."""
    total = max(
        (
            event["PhaseStarted"]["payload"]["transitions_total"]
            for event in events
            if "PhaseStarted" in event and event["PhaseStarted"]["phase"]["name"] == "stateful"
        ),
        default=0,
    )
    covered = {
        case["transition"]["id"]
        for event in events
        if "ScenarioFinished" in event and event["ScenarioFinished"]["phase"] == "stateful"
        for case in event["ScenarioFinished"]["recorder"].get("cases", {}).values()
        if case.get("transition") and case.get("is_transition_applied")
    }
    return covered, total
