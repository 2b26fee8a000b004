"""Contract fuzzing: schemathesis drives a real server from its own OpenAPI document.

Every operation (the SSE streams aside: they never end), positive and negative data (the
coverage and fuzzing phases), and stateful sequences along the document's links (create -> read
-> cancel -> redeploy, read -> input, ...). Checks: no 5xx, every status documented, content
types and bodies as documented, invalid data refused. The CLI runs in a process of its own (it is
asyncio/threads, the test process is gevent-patched); FUZZ_EXAMPLES / FUZZ_STEPS scale it up for
`make fuzz`.
"""

import base64
import os
import re
import subprocess
import sys

import requests

from tests.helpers import ROOT

CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance,negative_data_rejection"
)
#: A kubeconfig the sandbox accepts (it deploys nowhere real): creates then reach the engine
#: instead of stopping at a garbled X-Kubeconfig header.
KUBECONFIG = base64.b64encode(b"apiVersion: v1\nkind: Config\n").decode()


def test_schemathesis_finds_nothing(start_server, tmp_path):
    server = start_server(
        env={
            "SANDBOX_APPLY_DELAY_S": "0.01",
            "SANDBOX_READY_DELAY_S": "0.05",
            "READINESS_POLL_S": "0.05",
            "ACCESS_LOG": "",
        }
    )
    examples = os.environ.get("FUZZ_EXAMPLES", "10")
    config = (ROOT / "tests/contract/schemathesis.toml").read_text()
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
        f"{server.base}/api/v1/openapi.json",
        "--exclude-tag",
        "streams",
        "--checks",
        CHECKS,
        "--max-examples",
        examples,
        "-H",
        f"X-Kubeconfig: {KUBECONFIG}",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=int(os.environ.get("FUZZ_TIMEOUT", "600")),
    )
    summary = done.stdout[done.stdout.find("SUMMARY") :]
    print(summary)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:] + server.output()[-4000:]
    # Positive control: it did test every operation but the streams, in every phase asked for.
    document = requests.get(f"{server.base}/api/v1/openapi.json", timeout=10).json()
    streams = sum(
        "streams" in op.get("tags", [])
        for path in document["paths"].values()
        for op in path.values()
        if isinstance(op, dict)
    )
    counts = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)\b", summary)
    assert counts, summary
    selected, total, tested = map(int, counts.groups())
    assert streams and tested == selected == total - streams, summary
    assert re.search(r"(\d+) generated, \1 passed", summary), summary
    assert "Stateful" in done.stdout and "API Links:" in done.stdout
