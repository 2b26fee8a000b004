"""A client generated from the OpenAPI document works with no hand edits: openapi-python-client
builds a package from the live server's /api/v1/openapi.json, and generated_client_flow.py
creates, waits for, lists, cancels and redeploys through it, every answer parsed into the
generated models (a body that does not parse as documented, or a status code the document does
not name, stops the flow). The flow runs in a process of its own with the plain interpreter
(httpx on threads; this process is gevent-patched).

Two ways a document loses a client, each shown by a control on a deliberately broken copy:
- the generator cannot read a part of it: it warns ("WARNING parsing POST /api/v1/tasks ...
  Endpoint will not be generated", or "Unable to parse ..." for a schema), and with
  --fail-on-warning the generation fails;
- it reads a part but loses its types, silently: the create body as `anyOf` of bare `required`
  lists beside its properties (the shape this document had) becomes `body: Any`, with no warning,
  and the flow, which builds the typed body, cannot even import it.
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import requests

from tests.contract.helpers import FAST_SANDBOX, SANDBOX_KUBECONFIG
from tests.helpers import ROOT

GENERATOR = Path(sys.executable).parent / "openapi-python-client"
#: The package's name, and no formatting pass (the generator would look for ruff on PATH).
GENERATOR_CONFIG = "package_name_override: engine_client\npost_hooks: []\n"
FLOW = ROOT / "tests/contract/generated_client_flow.py"
CREATE = ("/api/v1/tasks", "post")


def generate(document: dict, out: Path) -> subprocess.CompletedProcess:
    """openapi-python-client on `document`, into out/engine_client; failing on any warning."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "openapi.json").write_text(json.dumps(document))
    (out / "config.yaml").write_text(GENERATOR_CONFIG)
    argv = [str(GENERATOR), "generate", "--path", str(out / "openapi.json")]
    argv += ["--output-path", str(out / "engine_client"), "--meta", "none"]
    argv += ["--config", str(out / "config.yaml"), "--fail-on-warning"]
    return subprocess.run(argv, capture_output=True, text=True, cwd=out, timeout=120)


def run_flow(out: Path, base: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(FLOW), str(out), base, SANDBOX_KUBECONFIG]
    return subprocess.run(argv, capture_output=True, text=True, cwd=out, timeout=300)


def create_body(document: dict) -> dict:
    path, method = CREATE
    return document["paths"][path][method]["requestBody"]["content"]["application/json"]


def test_a_generated_client_creates_waits_lists_cancels_and_redeploys(start_server, tmp_path):
    server = start_server(env=FAST_SANDBOX)
    document = requests.get(f"{server.base}/api/v1/openapi.json", timeout=30).json()
    generated = generate(document, tmp_path)
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output
    assert "warning" not in output.lower() and "unable to" not in output.lower(), output

    flow = run_flow(tmp_path, server.base)
    assert flow.returncode == 0, flow.stdout + flow.stderr + server.output()[-4000:]
    seen = json.loads(flow.stdout)

    created, waited = seen["created"], seen["waited"]
    assert (created["model"], created["statusType"]) == ("Task", "TaskStatus")
    assert created["status"] in {"queued", "running", "applying"}
    assert created["projectId"] == "generated-client" and created["image"] == "nginx:1.27"
    assert (waited["model"], waited["statusType"]) == ("WaitedTask", "WaitedTaskStatus")
    assert waited["id"] == created["id"]
    assert (waited["status"], waited["waitOutcome"]) == ("completed", "terminal")
    assert [(t["model"], t["id"], t["status"]) for t in seen["listed"]] == [
        ("Task", created["id"], "completed")
    ]
    cancelled, settled = seen["cancelled"], seen["cancelledSettled"]
    assert cancelled["model"] == "Task" and cancelled["image"] == "nginx:sandbox-never-ready"
    assert cancelled["cancelRequested"] and not created["cancelRequested"]
    assert (settled["id"], settled["status"]) == (cancelled["id"], "cancelled")
    redeploy = seen["redeploy"]
    assert redeploy["model"] == "Task" and redeploy["id"] != cancelled["id"]
    assert redeploy["retriedFrom"] == cancelled["id"]
    assert (redeploy["projectId"], redeploy["image"]) == ("generated-client", cancelled["image"])
    assert seen["redeploySettled"]["status"] == "cancelled"


def test_the_checks_catch_a_document_a_client_cannot_use(client, tmp_path):
    document = client.get("/api/v1/openapi.json").get_json()
    # Unreadable: the create body points at a schema the document does not have.
    unreadable = copy.deepcopy(document)
    create_body(unreadable)["schema"] = {"$ref": "#/components/schemas/NoSuchSchema"}
    refused = generate(unreadable, tmp_path / "unreadable")
    assert refused.returncode != 0
    assert "WARNING parsing POST /api/v1/tasks" in refused.stdout + refused.stderr

    # Untyped: the conditional requirement beside the properties, as this document once had it.
    untyped = copy.deepcopy(document)
    fresh, redeploy = create_body(untyped)["schema"]["anyOf"]
    create_body(untyped)["schema"] = {
        **{k: v for k, v in fresh.items() if k not in ("title", "required")},
        "anyOf": [{"required": fresh["required"]}, {"required": redeploy["required"]}],
    }
    generated = generate(untyped, tmp_path / "untyped")
    assert generated.returncode == 0, generated.stdout + generated.stderr  # not a word of warning
    api = (tmp_path / "untyped/engine_client/api/tasks/create_task.py").read_text()
    assert "body: Any" in api
    flow = run_flow(tmp_path / "untyped", "http://127.0.0.1:9")  # never reaches a server
    assert flow.returncode != 0
    assert "cannot import name 'CreateTaskNewTask'" in flow.stderr, flow.stderr
