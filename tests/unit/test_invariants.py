"""The invariants the product stands on, checked over the source itself."""

import ast
import re
from pathlib import Path

from engine.core.status import ACTIVE, LEASED, TERMINAL, Status
from engine.sql import queries

ROOT = Path(__file__).resolve().parents[2]
STORAGE = (
    "engine.db",
    "engine.operations.migrations",
    "engine.sql",
    "engine.core.transitions",
    "engine.core.leases",
    "engine.cleanup.worker",
    "engine.cleanup.jobs",
    "engine.cleanup.task_runtimes",
    "engine.core.handle",
    "engine.process",
    "psycopg",
    "psycopg_pool",
)
#: `status IN ('a', 'b')`, also `t.status` and `%(to)s::task_status IN (...)`.
STATUS_SET = re.compile(r"status\s+IN\s*\(([^)]*)\)", re.IGNORECASE)
DB_CALL = re.compile(r"\bdb\.\w")
SQL_TEXT = re.compile(r"\b(INSERT INTO|UPDATE \w+ SET|DELETE FROM|SELECT .* FROM)\b")


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # `from engine import db`
    return names


def test_only_the_guarded_transition_writes_status():
    writers = [
        name
        for name, text in queries.items()
        # `=(?!>)`: an assignment, not a named argument (`notify_task_changed(..., status => ...)`).
        if re.search(r"UPDATE\s+deploy_tasks\b", text)
        and re.search(r"(SET|,)\s*status\s*=(?!>)", text)
    ]
    # task_transition_moved is the same statement returning fewer columns (engine/sql).
    assert writers == ["task_transition", "task_transition_moved"]
    whole, moved = (queries[name].split("\n", 1)[1] for name in writers)
    assert whole.rsplit("SELECT m.", 1)[0] == moved.rsplit("SELECT m.", 1)[0]


def test_runners_and_integrations_import_no_storage():
    for folder in ("engine/runners", "engine/integrations"):
        for path in (ROOT / folder).glob("*.py"):
            leaked = {n for n in imports_of(path) if n.startswith(STORAGE)}
            assert not leaked, f"{path.relative_to(ROOT)} imports {leaked}"


def test_no_sql_outside_engine_sql():
    for folder in ("blueprints", "engine/runners", "engine/integrations", "engine/readside"):
        for path in (ROOT / folder).rglob("*.py"):
            assert not SQL_TEXT.search(path.read_text()), f"SQL text in {path.relative_to(ROOT)}"


def test_starting_a_local_process_does_not_load_the_cleanup_worker():
    for path in (
        "engine/core/handle.py",
        "engine/cleanup/task_runtimes.py",
        "engine/cleanup/process_groups.py",
    ):
        assert "engine.cleanup.worker" not in imports_of(ROOT / path), path
    assert "engine.cleanup.task_runtimes" in imports_of(
        ROOT / "engine/core/handle.py"
    )  # the control


def test_streams_do_not_import_the_page_routes():
    for path in ("blueprints/ws.py", "blueprints/timeline_hub.py", "blueprints/streams.py"):
        assert "blueprints.pages" not in imports_of(ROOT / path), path
    assert "blueprints.fragments" in imports_of(ROOT / "blueprints/timeline_hub.py")


def test_every_request_schema_carries_the_storable_text_rule():
    # A schema that skipped RequestSchema would let NUL or a lone surrogate reach PostgreSQL (500).
    import marshmallow

    import blueprints.schemas
    import blueprints.tools
    from blueprints.schemas import RequestSchema

    defined = [
        obj
        for module in (blueprints.schemas, blueprints.tools)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, marshmallow.Schema)
        and obj.__module__ == module.__name__
        and obj is not RequestSchema
    ]
    assert len(defined) >= 10  # the scan sees the schemas (positive control)
    assert [s.__name__ for s in defined if not issubclass(s, RequestSchema)] == []


def test_json_is_read_only_through_the_depth_limited_loader():
    # request.get_json / json.loads on untrusted text recurse without limit (RecursionError).
    for path in (ROOT / "blueprints").rglob("*.py"):
        text = path.read_text()
        assert "get_json(" not in text and "json.loads(" not in text, path.relative_to(ROOT)
    assert "json.loads(" in (ROOT / "engine/trust/untrusted.py").read_text()  # the detector matches


def test_the_manifest_rules_are_written_once():
    # Kinds, input types and placeholder syntax drifted when templates and the AI runner each
    # had their own copy; engine/trust/manifests.py is the one home.
    placeholder = re.compile(r"re\.compile\(r[\"']\\\$\\\{")
    kinds = re.compile(r"\b(CLUSTER_SCOPED_KINDS|NAMESPACED_KINDS)\s*=")
    types = re.compile(r"INPUT_TYPES\s*=\s*[{(f]")
    home = (ROOT / "engine/trust/manifests.py").read_text()
    assert placeholder.search(home) and kinds.search(home) and types.search(home)  # the control
    for folder in ("engine", "blueprints"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "manifests.py":
                continue
            text = path.read_text()
            for rule in (placeholder, kinds, types):
                assert not rule.search(text), f"{path.relative_to(ROOT)} redefines {rule.pattern}"


def imported_test_modules(source: str) -> set[str]:
    """Imports in `source` that name one of our test modules (`tests.*.test_*`, or relative)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names.add(module)
            joint = "." if node.module else ""  # `from . import test_x` is `.test_x`
            names.update(f"{module}{joint}{a.name}" for a in node.names)
    ours = {n for n in names if n.startswith(("tests.", "."))}  # not a library's test_utils
    return {n for n in ours if any(part.startswith("test_") for part in n.split("."))}


def test_test_modules_import_helpers_and_conftest_never_another_test_module():
    # The control: both spellings of "import another test module" are seen.
    assert imported_test_modules(
        "from tests.unit.test_store import at\n"
        "from . import test_store\n"
        "from aiohttp.test_utils import RawTestServer\n"
    ) == {"tests.unit.test_store", "tests.unit.test_store.at", ".test_store"}
    paths = list((ROOT / "tests").rglob("*.py"))
    assert ROOT / "tests/unit/test_invariants.py" in paths
    for path in paths:
        leaked = imported_test_modules(path.read_text())
        assert not leaked, f"{path.relative_to(ROOT)} imports the test module(s) {leaked}"


IDENTITY_HEADER = re.compile(
    r"""["'](X-User[\w-]*|X-Forwarded-(User|Email|Groups)|X-Namespace|"""
    r"""X-Auth-Request-[\w-]+|Remote-User|X-Remote-User)["']""",
    re.I,
)


def test_identity_comes_only_from_the_auth_seam():
    """No module reads a client-supplied identity header, and only blueprints/auth.py reads
    `X-Workspace` (a choice among signed workspaces) or builds an Identity."""
    assert IDENTITY_HEADER.search('request.headers.get("X-Forwarded-User")')  # the detector works
    for folder in ("blueprints", "engine", "app.py", "wsgi.py"):
        paths = [ROOT / folder] if folder.endswith(".py") else (ROOT / folder).rglob("*.py")
        for path in paths:
            text = path.read_text()
            name = path.relative_to(ROOT).as_posix()
            assert not IDENTITY_HEADER.search(text), f"{name} reads an identity header"
            # (the operator's CLI acts as itself, outside any request)
            if name not in (
                "blueprints/auth.py",
                "blueprints/oidc.py",
                "engine/lifecycle/identity.py",
                "engine/operations/operator.py",
            ):
                assert "X-Workspace" not in text and not re.search(r"\bIdentity\(", text), name


def test_blueprints_read_through_the_read_side():
    """Pages, API and streams reach storage only through engine/readside and engine/actions."""
    assert DB_CALL.search('rows = runtime().db.all("task_list_page")')  # the control
    for path in (ROOT / "blueprints").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not DB_CALL.search(line), f"{path.relative_to(ROOT)}:{number}: {line.strip()}"


def test_every_status_set_in_sql_is_one_of_status_py():
    """Each set of task statuses in SQL (queries and migrations) is LEASED, ACTIVE or TERMINAL."""
    named = {
        frozenset(LEASED): "LEASED",
        frozenset(ACTIVE): "ACTIVE",
        frozenset(TERMINAL): "TERMINAL",
    }
    task_statuses = {s.value for s in Status}
    found = 0
    for path in [
        *sorted((ROOT / "engine/sql").glob("*.sql")),
        *sorted((ROOT / "migrations").glob("*.sql")),
    ]:
        for match in STATUS_SET.finditer(path.read_text()):
            spelled = frozenset(re.findall(r"'(\w+)'", match.group(1)))
            if not spelled <= task_statuses:
                continue  # another table's statuses (task_runtimes)
            assert spelled in named, f"{path.name}: IN ({match.group(1)}) is no status.py set"
            found += 1
    assert found >= 20  # the control: the pattern does find the sets
    assert frozenset({"running", "blocked"}) not in named


def test_the_engine_speaks_no_http():
    """HTTP statuses of domain errors live in blueprints/errors.py only, and every one is mapped."""
    from blueprints.errors import HTTP_STATUS
    from engine.core import errors

    for path in (ROOT / "engine").rglob("*.py"):
        assert "http_status" not in path.read_text(), f"{path.relative_to(ROOT)} speaks HTTP"
    domain = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.DomainError)
    ]
    assert errors.TaskNotFound in domain  # the control
    assert [c.__name__ for c in domain if c not in HTTP_STATUS] == []


def test_commands_import_no_blueprint():
    """Operator commands stand on the engine beside the web surface, never on top of it."""
    assert "blueprints.errors" in imports_of(ROOT / "blueprints/api.py")  # the control
    for path in (ROOT / "commands").rglob("*.py"):
        leaked = {n for n in imports_of(path) if n.split(".")[0] == "blueprints"}
        assert not leaked, f"{path.relative_to(ROOT)} imports {leaked}"


def test_the_cli_and_the_api_agree_on_what_is_not_found():
    """A domain error the API answers 404 exits 3 from a command, and only such an error does."""
    from blueprints.errors import http_status
    from commands.operate import EXIT_NOT_FOUND, exit_code
    from engine.core import errors
    from engine.operations import operator as operations

    domain = [
        c
        for module in (errors, operations)
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, errors.DomainError)
    ]
    assert operations.CleanupJobNotFound in domain  # the control
    disagree = [
        c.__name__
        for c in domain
        if (exit_code(c()) == EXIT_NOT_FOUND) != (http_status(c()) == 404)
    ]
    assert disagree == []


def test_sql_files_are_alphabetised():
    for path in sorted((ROOT / "engine/sql").glob("*.sql")):
        names = re.findall(r"^-- ([a-z0-9_]+) --$", path.read_text(), re.MULTILINE)
        assert names, path.name  # the control: the headers are found
        assert names == sorted(names), f"{path.name} is not in alphabetical order"


def test_the_handle_implements_what_runners_are_given():
    from engine.core import handle
    from engine.runners import context

    members = [
        name
        for name, value in vars(context.TaskHandle).items()
        if callable(value) and not name.startswith("_")
    ]
    assert "checkpoint" in members  # the control
    assert [name for name in members if not hasattr(handle.TaskHandle, name)] == []


def test_every_adapter_implements_its_integration_protocol():
    """Integrations' fields are typed by the protocols in engine/integrations/base.py; each real
    and sandbox adapter has every method its protocol declares, and the runners call nothing
    on a devbox, gateway or template catalog that the protocol leaves out."""
    from engine.integrations import base, devbox, gateway, kube, sandbox, templates

    implementations = {
        base.Cluster: [kube.KubeCluster, kube.NoKubeconfig, sandbox.SandboxCluster],
        base.Devbox: [devbox.DevboxClient, sandbox.SandboxDevbox],
        base.Gateway: [gateway.GatewayClient, sandbox.SandboxGateway],
        base.Templates: [templates.TemplateCatalog],
    }

    def members(protocol) -> set[str]:
        return {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}

    assert {"attach", "exec"} <= members(base.Devbox)  # the control
    missing = [
        f"{adapter.__name__}.{name}"
        for protocol, adapters in implementations.items()
        for adapter in adapters
        for name in sorted(members(protocol))
        if not callable(getattr(adapter, name, None))
    ]
    assert missing == []
    called = re.compile(r"\b(devbox|gateway|templates)\.(\w+)\(")
    protocol_of = {"devbox": base.Devbox, "gateway": base.Gateway, "templates": base.Templates}
    calls = {
        (seam, name)
        for path in (ROOT / "engine/runners").glob("*.py")
        for seam, name in called.findall(path.read_text())
    }
    assert ("devbox", "exec") in calls  # the control: the pattern finds the runners' calls
    assert sorted(c for c in calls if c[1] not in members(protocol_of[c[0]])) == []


def test_settings_are_read_only_through_their_one_definition():
    readers = re.compile(
        r"os\.environ\.get|os\.environ\[[^\]]+\](?!\s*=)|os\.getenv|environ\.get\("
    )
    sources = [ROOT / "app.py", ROOT / "wsgi.py", ROOT / "gunicorn.conf.py"]
    sources += [*(ROOT / "engine").rglob("*.py"), *(ROOT / "blueprints").rglob("*.py")]
    for path in sources:
        if path == ROOT / "engine/operations/config.py":
            continue
        found = readers.findall(path.read_text().replace("request.environ.get", ""))
        assert not found, f"{path.relative_to(ROOT)} reads {found}: use engine/operations/config.py"
