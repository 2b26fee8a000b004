"""The invariants the product stands on, checked over the source itself."""

import ast
import re
from pathlib import Path

from psycopg import _queries as psycopg_queries

from engine.core.status import ACTIVE, LEASED, TERMINAL, Status
from engine.sql import queries

ROOT = Path(__file__).resolve().parents[2]
STORAGE = (
    "engine.db",
    "engine.operations.migrations",
    "engine.sql",
    "engine.core.transitions",
    "engine.core.leases",
    "engine.maintenance.cleanup_worker",
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
    # task_transition_moved is the same statement returning fewer columns.
    assert writers == ["task_transition", "task_transition_moved"]
    whole, moved = (queries[name].split("\n", 1)[1] for name in writers)
    assert whole.rsplit("SELECT m.", 1)[0] == moved.rsplit("SELECT m.", 1)[0]
    assert whole != moved  # the control: the two differ in what they return


#: A status assignment of an UPDATE as written in a .sql file.
STATUS_ASSIGNMENT = re.compile(r"^\s*status = %\(to\)s::task_status,$", re.MULTILINE)


def test_the_status_write_is_written_once():
    """The narrow-return statement is derived from task_transition by the query loader
    (engine/sql/__init__.py), not a second copy of its ~80 lines kept equal by a test."""
    written = (ROOT / "engine/sql/deploy_tasks.sql").read_text()
    copy = written.split("-- task_transition --", 1)[1].split("\n\n", 1)[0]
    assert len(STATUS_ASSIGNMENT.findall(written + copy)) == 2  # the control: a copy is seen
    assert len(STATUS_ASSIGNMENT.findall(written)) == 1


def test_the_retention_purge_is_written_once():
    """One statement deletes tasks past retention (cleanup_job_purge): the purge of claimed
    devbox purges and that of due purges without a devbox were two copies of its rule."""
    purges = [name for name, text in queries.items() if "DELETE FROM deploy_tasks" in text]
    assert purges == ["cleanup_job_purge"]  # (the scan finds it: the control)
    written = "".join(p.read_text() for p in (ROOT / "engine/sql").glob("*.sql"))
    assert written.count("DELETE FROM deploy_tasks") == 1


def test_every_named_query_is_written_in_a_sql_file():
    """No query is built in Python (by editing another's text): each name heads a block."""
    headers = {
        name
        for path in (ROOT / "engine/sql").glob("*.sql")
        for name in re.findall(r"^-- ([a-z0-9_]+) --$", path.read_text(), re.MULTILINE)
    }
    assert "task_transition_moved" in headers  # the control
    assert sorted(set(queries) - headers) == []


def test_every_query_is_short_enough_for_psycopg_to_cache_its_conversion():
    """Longer text is re-parsed on every call (a twelfth of a deployment's server CPU once the
    transition outgrew it, measured with py-spy). The text sent drops comments and indentation,
    which is safe only while no string literal spans lines."""
    limit = psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
    too_long = {n: len(t.encode()) for n, t in queries.items() if len(t.encode()) > limit}
    assert too_long == {}
    # The control: the transition as written (comments, indentation) is over the limit.
    written = (ROOT / "engine/sql/deploy_tasks.sql").read_text()
    block = written.split("-- task_transition --", 1)[1].split("\n\n", 1)[0]
    assert len(block.encode()) > limit
    spanning = [
        name
        for name, text in queries.items()
        for line in text.splitlines()
        if not line.startswith("--") and line.count("'") % 2
    ]
    assert spanning == []


def test_runners_and_integrations_import_no_storage():
    for folder in ("engine/runners", "engine/integrations"):
        for path in (ROOT / folder).rglob("*.py"):
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
        assert "engine.maintenance.cleanup_worker" not in imports_of(ROOT / path), path
    assert "engine.cleanup.task_runtimes" in imports_of(
        ROOT / "engine/core/handle.py"
    )  # the control


def test_streams_do_not_import_the_page_routes():
    """The streams render through the pages' fragments and views, never through a page route."""
    page_routes = {m for m in route_modules() if m.startswith("blueprints.pages.")}
    assert "blueprints.pages.project_page" in page_routes  # the control
    hub = ROOT / "blueprints/streams/timeline_hub.py"
    assert "blueprints.pages.fragments" in imports_of(hub)  # the scan sees the pages' imports
    for path in (ROOT / "blueprints/streams").rglob("*.py"):
        leaked = {
            n for n in imports_of(path) if n in page_routes or n.rpartition(".")[0] in page_routes
        }
        assert not leaked, f"{path.relative_to(ROOT)} imports {leaked}"


def test_every_request_schema_carries_the_storable_text_rule():
    # A schema that skipped RequestSchema would let NUL or a lone surrogate reach PostgreSQL (500).
    import marshmallow

    import blueprints.api.tool_catalog
    import blueprints.schemas
    import engine.runners.kinds
    from engine.trust.untrusted import RequestSchema

    defined = [
        obj
        for module in (blueprints.schemas, blueprints.api.tool_catalog, engine.runners.kinds)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, marshmallow.Schema)
        and obj.__module__ == module.__name__
        and obj is not RequestSchema
    ]
    assert len(defined) >= 15  # the scan sees the schemas, the sources' too (positive control)
    assert [s.__name__ for s in defined if not issubclass(s, RequestSchema)] == []


def test_json_is_read_only_through_the_depth_limited_loader():
    # request.get_json / json.loads on untrusted text recurse without limit (RecursionError).
    for path in (ROOT / "blueprints").rglob("*.py"):
        text = path.read_text()
        assert "get_json(" not in text and "json.loads(" not in text, path.relative_to(ROOT)
    assert "json.loads(" in (ROOT / "engine/trust/untrusted.py").read_text()  # the detector matches


def test_an_upstream_answer_is_read_through_the_typed_accessors():
    """A parsed answer's fields are read by type (engine/integrations/shapes.py), never by a
    `.get()` chain or an index on the parsed body, which assume its shape (an answer of
    `{"status": "x"}` was a 500)."""
    chained = re.compile(r"\.json\(\)\s*(\.get\(|\[)")
    assert chained.search('user = (response.json().get("status") or {})')  # the control
    assert chained.search("kind = response.json()['kind']")
    for path in (ROOT / "engine").rglob("*.py"):
        found = chained.search(path.read_text())
        assert not found, f"{path.relative_to(ROOT)}: {found.group()}"


#: Ways to get an answer from another server past engine/integrations/upstream.py's caps: a
#: session or one-shot call of requests or urllib made elsewhere, a body read whole
#: (RESTResponse.read, urllib3's `.data`) or streamed unbounded (iter_lines, iter_content), and
#: PyJWT's own key-set fetch.
UNBOUNDED_READS = re.compile(
    r"requests\.(Session|get|post|put|patch|delete|head|request)\(|urlopen\(|urllib\.request|"
    r"\bHTTPAdapter\(|\.iter_lines\(|\.iter_content\(|"
    r"\b(response|resp|raw)\.(data|read)\b|jwt\.PyJWKClient\("
)


def test_answers_from_outside_are_read_only_through_the_bounded_reader():
    # urllib3 and requests read and inflate a body whole, without a cap (a 16 KiB gzip answer
    # grew a worker by 2 GB); every outbound request goes through upstream.py's caps.
    home = (ROOT / "engine/integrations/upstream.py").read_text()
    assert UNBOUNDED_READS.search("session = requests.Session()")  # the controls
    assert UNBOUNDED_READS.search("data = response.read()")
    assert UNBOUNDED_READS.search("for line in response.iter_lines():")
    assert not UNBOUNDED_READS.search("raw.read1(READ_CHUNK_BYTES)") and "read1(" in home
    for folder in ("engine", "blueprints"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "upstream.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                assert not UNBOUNDED_READS.search(code), (
                    f"{path.relative_to(ROOT)}:{number}: {line}"
                )


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


#: The fields a kubeconfig's context is found by.
KUBECONFIG_FIELDS = {"current-context", "contexts", "clusters", "users"}


def kubeconfig_reads(source: str) -> list[int]:
    """Lines where `source` reads a kubeconfig's own fields: `doc["contexts"]`,
    `doc.get("current-context")`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            key = node.slice
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
            key = node.args[0]
        else:
            continue
        if isinstance(key, ast.Constant) and key.value in KUBECONFIG_FIELDS:
            found.append(node.lineno)
    return found


def test_one_kubeconfig_reader():
    """Only engine/integrations/kube/kubeconfig.py reads a kubeconfig's fields (the "current
    context, else the only context" rule, a security-adjacent one, was written in the web layer
    too); the web layer reaches it through engine/lifecycle/kubeconfigs.py, and nothing is
    handed to it through the app's config."""
    home = ROOT / "engine/integrations/kube/kubeconfig.py"
    assert kubeconfig_reads(home.read_text())  # the control: the reader's reads are seen
    assert kubeconfig_reads('name = doc.get("current-context")\nc = doc["contexts"]\n') == [1, 2]
    assert kubeconfig_reads('tags = ["clusters"]\n') == []
    for folder in ("engine", "blueprints"):
        for path in (ROOT / folder).rglob("*.py"):
            if path != home:
                found = kubeconfig_reads(path.read_text())
                assert not found, f"{path.relative_to(ROOT)}:{found} reads a kubeconfig's fields"
    for path in [
        ROOT / "app.py",
        *(ROOT / "blueprints").rglob("*.py"),
        *(ROOT / "templates").rglob("*.html"),
    ]:
        assert "KUBECONFIG_CHECK" not in path.read_text(), path.relative_to(ROOT)


def kind_listings(source: str, kinds) -> list[int]:
    """Lines where `source` spells two or more source kinds together: in one dict, set, list or
    tuple, or in the comparisons of one function (an if-chain over kinds)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            items = node.keys
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            items = node.elts
        elif isinstance(node, ast.FunctionDef):
            items = [
                item
                for compare in ast.walk(node)
                if isinstance(compare, ast.Compare)
                for item in (compare.left, *compare.comparators)
            ]
        else:
            continue
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in kinds}
        if len(named) >= 2:
            found.append(node.lineno)
    return found


def kind_comparisons(source: str, kinds) -> list[int]:
    """Lines where `source` compares something with one source kind's name: `kind ==
    "template"`, `source.get("kind") != "github"`, or `kind in ("prompt",)` (a kind's name in a
    collection counts where the other side speaks of a kind: `name in ("prompt", "description")`
    is about a field)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        spelled = any(isinstance(o, ast.Constant) and o.value in kinds for o in operands)
        about_kind = "kind" in ast.unparse(node)
        listed = about_kind and any(
            isinstance(o, (ast.Tuple, ast.List, ast.Set))
            and any(isinstance(e, ast.Constant) and e.value in kinds for e in o.elts)
            for o in operands
        )
        if spelled or listed:
            found.append(node.lineno)
    return found


def test_the_source_kinds_are_listed_once():
    """Only engine/runners/kinds.py names the source kinds; every other place reads them from its
    registry, together (a kind spelled in ten files drifted: steps, titles, runners) or alone (a
    `kind == "template"` branch beside the registry: what a kind does is a field of its entry)."""
    from engine.runners.kinds import KINDS

    assert kind_listings('EXPECTED = {"image": 3, "prompt": 5}\n', KINDS) == [1]  # the control
    chain = 'def f(kind):\n    if kind == "image":\n        return 1\n    if kind == "github":\n'
    assert kind_listings(chain + "        return 2\n", KINDS) == [1]
    alone = 'if source.get("kind") != "template":\n    pass\nok = kind in ("prompt",)\n'
    assert kind_comparisons(alone, KINDS) == [1, 3]  # the controls: a kind spelled alone
    assert kind_comparisons('ok = name in ("prompt", "description")\n', KINDS) == []
    home = ROOT / "engine/runners/kinds.py"
    for folder in ("engine", "blueprints"):
        for path in (ROOT / folder).rglob("*.py"):
            if path != home:
                listed = kind_listings(path.read_text(), KINDS)
                assert not listed, f"{path.relative_to(ROOT)}:{listed} lists source kinds"
                alone = kind_comparisons(path.read_text(), KINDS)
                assert not alone, f"{path.relative_to(ROOT)}:{alone} spells a source kind alone"


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
    """No module reads a client-supplied identity header, and only the auth seam (the gate and
    its modes) reads `X-Workspace` (a choice among signed workspaces) or builds an Identity."""
    assert IDENTITY_HEADER.search('request.headers.get("X-Forwarded-User")')  # the detector works
    for folder in ("blueprints", "engine", "app.py", "wsgi.py"):
        paths = [ROOT / folder] if folder.endswith(".py") else (ROOT / folder).rglob("*.py")
        for path in paths:
            text = path.read_text()
            name = path.relative_to(ROOT).as_posix()
            assert not IDENTITY_HEADER.search(text), f"{name} reads an identity header"
            # (the operator's CLI acts as itself, outside any request)
            if name not in (
                "blueprints/auth/gate.py",
                "blueprints/auth/modes.py",
                "blueprints/auth/oidc.py",
                "engine/lifecycle/identity.py",
                "engine/lifecycle/operator.py",
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
    """HTTP statuses of domain errors live in blueprints/errors.py only, and every one is mapped;
    the engine imports no web framework (transport errors live with the blueprints)."""
    import blueprints.errors
    from blueprints.errors import HTTP_STATUS
    from engine import errors

    web = ("flask", "werkzeug", "blueprints")
    assert "flask" in {n.split(".")[0] for n in imports_of(ROOT / "blueprints/errors.py")}
    for path in (ROOT / "engine").rglob("*.py"):
        assert "http_status" not in path.read_text(), f"{path.relative_to(ROOT)} speaks HTTP"
        leaked = {n for n in imports_of(path) if n.split(".")[0] in web}
        assert not leaked, f"{path.relative_to(ROOT)} imports {leaked}"
    domain = [
        c
        for module in (errors, blueprints.errors)
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, errors.DomainError)
    ]
    assert errors.TaskNotFound in domain and blueprints.errors.UntrustedHost in domain  # control
    assert [c.__name__ for c in domain if c not in HTTP_STATUS] == []


def error_roots(classes: list[type], base: type) -> set[type]:
    """The error families among `classes` (an exception class that others derive from) that do
    not stand under `base`."""
    return {
        c
        for c in classes
        if not issubclass(c, base) and any(o is not c and issubclass(o, c) for o in classes)
    }


def test_the_engine_errors_have_one_base():
    """The domain errors and the integration errors (and LeaseLost) stand under one base,
    engine/errors.py's EngineError: the two families once had a root each."""
    import importlib
    import pkgutil

    import engine
    from engine.errors import DomainError, EngineError, LeaseLost
    from engine.integrations.base import IntegrationError

    classes = []
    for info in pkgutil.walk_packages(engine.__path__, "engine."):
        module = importlib.import_module(info.name)
        classes += [
            c
            for c in vars(module).values()
            if isinstance(c, type) and issubclass(c, Exception) and c.__module__ == info.name
        ]
    assert {DomainError, IntegrationError, LeaseLost} <= set(classes)  # the scan finds them

    class Root(Exception):
        pass

    class Leaf(Root):
        pass

    assert error_roots([*classes, Root, Leaf], EngineError) == {Root}  # the control
    assert error_roots(classes, EngineError) == set()


def test_a_lost_lease_is_never_an_answer():
    """LeaseLost is an internal fencing signal, not a domain error: no error handler answers it,
    and only a run's handle raises it, which no blueprint holds."""
    from blueprints.errors import HTTP_STATUS
    from engine import errors

    assert issubclass(errors.TaskNotFound, errors.DomainError)  # the control
    assert not issubclass(errors.LeaseLost, errors.DomainError)
    assert errors.LeaseLost not in HTTP_STATUS
    assert "engine.core.handle" in imports_of(ROOT / "engine/process.py")  # the control
    for path in [*(ROOT / "blueprints").rglob("*.py"), ROOT / "app.py"]:
        held = {n for n in imports_of(path) if n.startswith("engine.core.handle")}
        assert not held, f"{path.relative_to(ROOT)} imports {held}"


def test_commands_import_no_blueprint():
    """Operator commands stand on the engine beside the web surface, never on top of it."""
    assert "blueprints.errors" in imports_of(ROOT / "blueprints/api/tool_routes.py")  # control
    for path in (ROOT / "commands").rglob("*.py"):
        leaked = {n for n in imports_of(path) if n.split(".")[0] == "blueprints"}
        assert not leaked, f"{path.relative_to(ROOT)} imports {leaked}"


def test_the_cli_and_the_api_agree_on_what_is_not_found():
    """A domain error the API answers 404 exits 3 from a command, and only such an error does."""
    from blueprints.errors import http_status
    from commands.operate import EXIT_NOT_FOUND, exit_code
    from engine import errors
    from engine.lifecycle import operator as operations

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
    assert [name for name in members if not hasattr(handle.FencedHandle, name)] == []


def shared_class_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """Class names defined in more than one of `sources` (path -> text), with where."""
    defined: dict[str, list[str]] = {}
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(path)
    return {name: paths for name, paths in defined.items() if len(paths) > 1}


def test_every_engine_class_has_a_name_of_its_own():
    """No two classes of the engine share a name, a protocol and its implementation included: a
    reader who meets `TaskHandle` must not have to find out which of two it is."""
    planted = {
        "a.py": "class TaskHandle(Protocol):\n    pass\n",
        "b.py": "class TaskHandle:\n    pass\n",
    }
    assert shared_class_names(planted) == {"TaskHandle": ["a.py", "b.py"]}  # the control
    sources = {
        str(path.relative_to(ROOT)): path.read_text() for path in (ROOT / "engine").rglob("*.py")
    }
    assert shared_class_names(sources) == {}


def test_every_adapter_implements_its_integration_protocol():
    """Integrations' fields are typed by the protocols in engine/integrations (base.py, and
    templates.py beside its Template); each real and sandbox adapter has every method its
    protocol declares, and the runners call nothing on a devbox, gateway or template catalog that
    the protocol leaves out."""
    from engine.integrations import (
        base,
        devbox,
        gateway,
        sandbox,
        sandbox_ai,
        templates,
    )
    from engine.integrations.kube.backend import NoKubeconfig
    from engine.integrations.kube.cluster import KubeCluster
    from engine.integrations.template_catalog import TemplateCatalog

    implementations = {
        base.Cluster: [KubeCluster, NoKubeconfig, sandbox.SandboxCluster],
        base.Devbox: [devbox.DevboxClient, sandbox_ai.SandboxDevbox],
        base.Gateway: [gateway.GatewayClient, sandbox_ai.SandboxGateway],
        templates.Templates: [TemplateCatalog],
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
    protocol_of = {"devbox": base.Devbox, "gateway": base.Gateway, "templates": templates.Templates}
    calls = {
        (seam, name)
        for path in (ROOT / "engine/runners").glob("*.py")
        for seam, name in called.findall(path.read_text())
    }
    assert ("devbox", "exec") in calls  # the control: the pattern finds the runners' calls
    assert sorted(c for c in calls if c[1] not in members(protocol_of[c[0]])) == []


# -- the import graph and the map (engine/__init__.py) -------------------------------------------
#: Top-level names of this project's own code (an import of one of them is an edge of the graph).
FIRST_PARTY = ("engine", "blueprints", "commands", "app", "wsgi", "tests", "bench")


def our_modules(*folders: str) -> dict[str, Path]:
    """Dotted name -> file of every module under `folders` (a package is its __init__)."""
    found = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(source: str, known) -> set[str]:
    """First-party modules `source` imports anywhere (module level, in a function, under
    TYPE_CHECKING); `from a import b` names module a.b when b is one, else a."""

    def owner(name: str) -> str:
        while name not in known and "." in name:
            name = name.rpartition(".")[0]
        return name

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        else:
            continue
        found.update(owner(n) for n in names if n.split(".")[0] in FIRST_PARTY)
    return found


def import_graph(*folders: str) -> dict[str, set[str]]:
    modules = our_modules(*folders)
    return {
        name: imported_modules(path.read_text(), modules) - {name} for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import cycles of `graph`: its strongly connected parts of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = set()
            while not part or node not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(part)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    """No module imports itself back, however far round and wherever the import sits (a
    function-local import only hides a loop until its first call)."""
    hidden = "def f():\n    from engine.readside import timeline\n"
    assert imported_modules(hidden, {"engine.readside.timeline"}) == {"engine.readside.timeline"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    graph = import_graph("engine", "blueprints")
    assert "engine.readside.timeline" in graph["engine.readside.explain"]  # the scan sees edges
    assert cycles(graph) == []


def engine_map() -> tuple[dict[str, set[str]], list[str]]:
    """The map in engine/__init__.py's docstring: what each entry may import, and the packages
    in layer order (lowest first)."""
    import engine

    allowed: dict[str, set[str]] = {}
    for name, body in re.findall(
        r"^([a-z_.]+): (.*?)(?=^[a-z_.]+: |\Z)", engine.__doc__, re.M | re.S
    ):
        listed = re.search(r"May import: (.*?)\.\s*$", body, re.S).group(1)
        allowed[name] = set() if listed == "nothing" else set(re.split(r",\s+", listed))
    return allowed, [name for name in allowed if "." not in name]


def package_of(module: str) -> str:
    """engine.core.handle -> core; engine.db -> db."""
    return module.split(".")[1]


def forbidden_imports(graph: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """`module -> import` for every import of an engine module that the map does not allow."""
    found = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("engine."):
            continue
        parts = module.split(".")[1:]
        entries = (".".join(parts[:n]) for n in range(1, len(parts) + 1))  # package, then module
        rules = set().union(*(allowed.get(entry, set()) for entry in entries))
        for target in sorted(targets):
            inside = target.startswith("engine.") and package_of(target) == package_of(module)
            granted = any(f"{target}.".startswith(f"engine.{rule}.") for rule in rules)
            if not (inside or granted):
                found.append(f"{module} -> {target}")
    return found


def climbing(graph: dict[str, set[str]], layers: list[str]) -> set[tuple[str, str]]:
    """(package, later package) for every import that climbs against the map's layer order."""
    return {
        (package_of(module), package_of(target))
        for module, targets in graph.items()
        if module.startswith("engine.")
        for target in targets
        if target.startswith("engine.")
        and layers.index(package_of(target)) > layers.index(package_of(module))
    }


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Engine package -> the other engine packages its modules import."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.startswith("engine."):
            packages.setdefault(package_of(module), set()).update(
                package_of(t) for t in targets if t.startswith("engine.")
            )
    return {package: others - {package} for package, others in packages.items()}


def test_every_engine_import_follows_the_map():
    """engine/__init__.py's map holds: each package imports only what its entry allows."""
    allowed, layers = engine_map()
    graph = import_graph("engine", "blueprints")
    engine_packages = {package_of(m) for m in graph if m.startswith("engine.")}
    assert set(layers) == engine_packages  # every package has an entry, and the parse found them
    assert allowed["runners"] >= {"integrations", "trust"} and allowed["trust"] == set()
    # The controls: a runner reaching storage, the read side writing a status, the engine
    # speaking the web layer's words, and the lowest layer reaching up are each caught.
    planted = {
        "engine.runners.direct": {"engine.db", "engine.core.handle"},
        "engine.readside.store": {"engine.core.transitions"},
        "engine.core.status": {"blueprints.presentation"},
        "engine.trust.secrets": {"engine.core.status"},
    }
    assert forbidden_imports(planted, allowed) == [
        "engine.core.status -> blueprints.presentation",
        "engine.readside.store -> engine.core.transitions",
        "engine.runners.direct -> engine.core.handle",
        "engine.runners.direct -> engine.db",
        "engine.trust.secrets -> engine.core.status",
    ]
    assert forbidden_imports(graph, allowed) == []


def test_the_engine_packages_form_layers():
    """Each engine package imports only packages listed before it in the map, so no two
    packages import each other, however far round. Modules free of cycles are not enough: nine
    packages once formed one knot of packages through imports that each looked harmless."""
    allowed, layers = engine_map()
    graph = import_graph("engine")
    # The control: one import from the lowest layer up makes a cycle of packages (trust <- core
    # <- trust) while the modules stay free of cycles; both checks see it.
    planted = {
        **graph,
        "engine.trust.secrets": graph["engine.trust.secrets"] | {"engine.core.status"},
    }
    assert cycles(planted) == []
    assert {"trust", "core"} <= set().union(*cycles(package_graph(planted)))
    assert climbing(planted, layers) == {("trust", "core")}
    assert "maintenance" in package_graph(graph)["process"]  # the scan sees package edges
    assert cycles(package_graph(graph)) == []
    assert climbing(graph, layers) == set()
    # The map itself lists only lower layers in each entry.
    listed_above = {
        (entry, rule)
        for entry, rules in allowed.items()
        for rule in rules
        if layers.index(rule.split(".")[0]) >= layers.index(entry.split(".")[0])
    }
    assert listed_above == set()


#: What the web layer speaks: CSS classes of a badge or hue, markup.
WEB_WORDS = re.compile(r"""tone-|is-busy|class=["']|<(div|span|li|ol|ul|strong|section|p)[\s>]""")


def test_the_engine_speaks_no_html():
    """Labels, hues and CSS classes live in blueprints/pages/presentation.py; the engine's read
    side keeps the facts and the words every surface shares (the explain tool's too)."""
    assert WEB_WORDS.search((ROOT / "blueprints/pages/presentation.py").read_text())  # control
    for path in (ROOT / "engine").rglob("*.py"):
        found = WEB_WORDS.search(path.read_text())
        assert not found, f"{path.relative_to(ROOT)} speaks the web's {found.group()!r}"


def route_modules() -> set[str]:
    """The blueprints modules that register routes (`bp = Blueprint(...)`)."""
    return {
        name
        for name, path in our_modules("blueprints").items()
        if re.search(r"^bp = Blueprint\(", path.read_text(), re.MULTILINE)
    }


def route_helpers_imported(path: Path, routes: set[str]) -> set[str]:
    """What `path` imports from a route module other than itself (module, or module.name)."""
    me = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in routes)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module in routes:
                    found.add(f"{node.module}.{alias.name}")
                elif f"{node.module}.{alias.name}" in routes:  # `from blueprints.api import x`
                    found.add(f"{node.module}.{alias.name}")
    return {n for n in found if not n.startswith(me + ".") and n != me}


def test_blueprints_never_import_another_route_module():
    """Helpers two surfaces share live in modules without routes (api/calls, request_helpers,
    api/tool_catalog, ...): a route module imported for its helpers drags its routes' concerns
    along."""
    routes = route_modules()
    assert {
        "blueprints.api.routes",
        "blueprints.api.tool_routes",
        "blueprints.pages.project_page",
    } <= routes  # the control
    # Every route imports the identity gate, which therefore holds none (the sign-in routes
    # are blueprints/auth/sign_in.py).
    assert "blueprints.request_helpers" not in routes and "blueprints.auth.gate" not in routes
    probe = ROOT / "blueprints/mcp/methods.py"
    assert route_helpers_imported(probe, routes | {"blueprints.api.tool_catalog"}) == {
        "blueprints.api.tool_catalog"
    }  # the detector sees `from blueprints.api import x`
    for path in sorted((ROOT / "blueprints").rglob("*.py")):
        leaked = route_helpers_imported(path, routes)
        assert not leaked, f"{path.relative_to(ROOT)} imports route helpers {sorted(leaked)}"


def surface_graph() -> dict[str, set[str]]:
    """The web layer's import graph between its groups: a sub-package of blueprints/ (api,
    pages, ...) or a shared module at its top (errors, schemas, ...)."""

    def group(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for module, targets in import_graph("blueprints").items():
        if module != "blueprints":
            ours = {group(t) for t in targets if t.startswith("blueprints.")}
            graph.setdefault(group(module), set()).update(ours - {group(module)})
    return graph


def test_the_web_layer_s_surfaces_import_each_other_without_a_cycle():
    """The surfaces form layers (blueprints/__init__.py): a page may lean on the auth gate, a
    stream on the pages' fragments, MCP on the API's tools, never the other way round."""
    graph = surface_graph()
    assert "blueprints.pages" in graph["blueprints.streams"]  # the scan sees groups and edges
    assert "blueprints.auth" in graph["blueprints.api"]
    planted = {**graph, "blueprints.auth": graph["blueprints.auth"] | {"blueprints.pages"}}
    assert {"blueprints.auth", "blueprints.pages"} in cycles(planted)  # the control
    assert cycles(graph) == []


def reraised_by_attribute(source: str) -> list[int]:
    """Lines where an `except ... as exc` decides by an attribute of `exc` (`exc.x`,
    hasattr/getattr) whether to raise it again: exceptions are told apart by type."""
    lines = []
    for handler in ast.walk(ast.parse(source)):
        if not isinstance(handler, ast.ExceptHandler) or not handler.name:
            continue
        name = handler.name
        for branch in ast.walk(handler):
            if not isinstance(branch, ast.If):
                continue
            asks = any(
                (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == name
                )
                or (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name)
                    and n.func.id in ("hasattr", "getattr")
                    and n.args
                    and isinstance(n.args[0], ast.Name)
                    and n.args[0].id == name
                )
                for n in ast.walk(branch.test)
            )
            raises = any(
                isinstance(n, ast.Raise)
                and (n.exc is None or (isinstance(n.exc, ast.Name) and n.exc.id == name))
                for n in ast.walk(branch)
            )
            if asks and raises:
                lines.append(branch.lineno)
    return lines


def test_exceptions_are_told_apart_by_type():
    control = (
        "try:\n    act()\nexcept DomainError as exc:\n    if exc.snapshot is None:\n        raise\n"
        "try:\n    act()\nexcept DomainError as e:\n    if not hasattr(e, 'snapshot'):\n"
        "        raise e\n"
    )
    assert reraised_by_attribute(control) == [4, 9]  # the detector sees both spellings
    assert reraised_by_attribute("try:\n    act()\nexcept TaskConflict:\n    pass\n") == []
    for folder in ("blueprints", "engine", "commands"):
        for path in (ROOT / folder).rglob("*.py"):
            found = reraised_by_attribute(path.read_text())
            assert not found, f"{path.relative_to(ROOT)}:{found} re-raises by an attribute"


def test_one_task_read_and_one_not_found_rule():
    """A task is read by engine/readside/store.py's read_task (`task_get`), and a read that found
    nothing becomes TaskNotFound in one place (store.task_found)."""
    reads, raises = [], []
    for folder in ("blueprints", "engine", "commands"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            name = path.relative_to(ROOT).as_posix()
            reads += [name] * len(re.findall(r"""["']task_get["']""", text))
            raises += [name] * len(re.findall(r"raise TaskNotFound\b", text))
    assert reads == ["engine/readside/store.py"]
    assert raises == ["engine/readside/store.py"]


def test_tests_share_one_helpers_module_and_define_no_twin_of_its_api_readers():
    """Plain helpers live in tests/helpers.py (conftest files hold fixtures): no test file imports
    tests.conftest, and none re-defines a task's events read or its wait for a status, by name or
    by shape (a `wait_for` on a snapshot's "status", a read of the events route's "items")."""

    def conftest_imports(path: Path, source: str) -> list[str]:
        package = list(path.relative_to(ROOT).parent.parts)
        found = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name == "tests.conftest"]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                names = [f"{module}.{a.name}" for a in node.names]
                found += [n for n in [module, *names] if n == "tests.conftest"]
        return found

    def reads_status(tree) -> bool:
        return any(
            isinstance(n, ast.Compare)
            and isinstance(n.left, ast.Subscript)
            and isinstance(n.left.slice, ast.Constant)
            and n.left.slice.value == "status"
            for n in ast.walk(tree)
        )

    def twins(source: str) -> list[str]:
        tree = ast.parse(source)
        defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        # Module-level functions only: a fake's `events` method is the cluster's, not the API's.
        found = [
            f"def {n.name}"
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name in ("events", "wait_for_status")
        ]
        for call in ast.walk(tree):
            callee = getattr(call, "func", None)
            if not (isinstance(call, ast.Call) and call.args) or ast.unparse(callee) != "wait_for":
                continue
            predicate = call.args[0]
            if isinstance(predicate, ast.Name):
                predicate = defs.get(predicate.id, predicate)
            if reads_status(predicate):
                found.append(f"line {call.lineno}: a wait_for on a status")
        for read in ast.walk(tree):
            if (
                isinstance(read, ast.Subscript)
                and isinstance(read.slice, ast.Constant)
                and read.slice.value == "items"
                and "/events" in ast.unparse(read.value)
            ):
                found.append(f"line {read.lineno}: a read of the events route")
        return found

    # The controls: each shape of twin is seen, and what merely resembles one is not.
    assert twins(
        "def events(client, task_id): ...\n"
        "def t(client, task_id):\n"
        "    wait_for(lambda: client.get(url).get_json()['status'] == 'applying')\n"
        "def reached():\n"
        "    return snap()['status'] in ('completed',)\n"
        "def u(client):\n"
        "    wait_for(reached, 30)\n"
        "    return client.get(f'/api/v1/tasks/{t}/events').get_json()['items']\n"
    ) == [
        "def events",
        "line 3: a wait_for on a status",
        "line 7: a wait_for on a status",
        "line 8: a read of the events route",
    ]
    assert (
        twins(
            "def t(snap, cluster):\n    wait_for(cluster.applying.is_set)\n"
            "    assert snap['status'] == 'failed'\n"
        )
        == []
    )
    assert conftest_imports(
        ROOT / "tests/integration/test_x.py",
        "from tests.conftest import wait_for\nfrom ..conftest import ROOT\n"
        "from .. import conftest\nfrom tests.contract.conftest import TOKEN\n",
    ) == ["tests.conftest", "tests.conftest", "tests.conftest"]

    paths = list((ROOT / "tests").rglob("*.py"))
    assert ROOT / "tests/integration/test_engine.py" in paths
    found = {
        str(path.relative_to(ROOT)): conftest_imports(path, source)
        + (twins(source) if path != ROOT / "tests/helpers.py" else [])
        for path in paths
        for source in [path.read_text()]
    }
    assert {where: what for where, what in found.items() if what} == {}


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


# -- one meaning per word: the tenant is the workspace, "namespace" is Kubernetes' -------------
#: Modules where `namespace` is a Kubernetes namespace (manifests, the kube adapter, templates).
KUBERNETES_MODULES = {
    "engine/integrations/base.py",
    "engine/integrations/kube/cluster.py",
    "engine/integrations/kube/backend.py",
    "engine/integrations/kube/network.py",
    "engine/integrations/kube/access.py",
    "engine/integrations/kube/response.py",
    "engine/integrations/kube/kubeconfig.py",
    "engine/integrations/sandbox.py",
    "engine/integrations/templates.py",
    "engine/readside/store.py",  # an applied resource's reference (kind/namespace/name)
    "engine/runners/database.py",
    "engine/runners/diagnosis.py",
    "engine/runners/direct.py",
    "engine/runners/template.py",
    "blueprints/pages/cluster_access.py",
    "blueprints/api/openapi_responses.py",  # an app resource's Kubernetes namespace (AppResource)
}
#: Tenant uses of the word anywhere, Kubernetes modules included.
TENANT_NAMESPACE = re.compile(
    r"identity(\(\))?\.namespace\b|\bctx\.namespace\b|\bwho\.namespace\b|%\(namespace\)s"
    r"|\brow\[\"namespace\"\]|payload(\.get\(|\[)\"namespace\"|Identity\([^)]*\bnamespace="
    r"|[\"']namespace[\"']\s*[:,][^,]*,\s*[\"']project[\"']"  # a NOTIFY payload's key
)


def namespace_identifiers(source: str) -> list[int]:
    """Lines where a Python identifier (name, attribute, parameter, keyword) is `namespace`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, (ast.arg, ast.keyword)):
            name = node.arg
        else:
            continue
        if name == "namespace":
            lines.append(node.lineno)
    return lines


def tenant_namespace_uses(path: str, text: str) -> list[str]:
    """Where `text` (a file at `path`) calls the tenant a namespace."""
    found = [f"{path}: {m.group(0)}" for m in TENANT_NAMESPACE.finditer(text)]
    if path.endswith(".sql"):
        found += [
            f"{path}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if re.search(r"\bnamespace\b", line, re.IGNORECASE)
        ]
    elif path.endswith(".py") and path not in KUBERNETES_MODULES:
        found += [f"{path}:{n}: identifier namespace" for n in namespace_identifiers(text)]
    return found


def test_namespace_means_only_the_kubernetes_namespace():
    """The tenant is `workspace` in SQL and code; `namespace` is left to Kubernetes contexts."""
    files = [
        *sorted((ROOT / "engine" / "sql").glob("*.sql")),
        *[p for p in sorted((ROOT / "migrations").glob("*.sql")) if int(p.name[:4]) > 12],
        *[
            p
            for d in ("engine", "blueprints", "commands")
            for p in sorted((ROOT / d).rglob("*.py"))
        ],
        *sorted((ROOT / "templates").rglob("*.html")),
    ]
    found = [
        hit for p in files for hit in tenant_namespace_uses(str(p.relative_to(ROOT)), p.read_text())
    ]
    assert found == []
    # The controls: each kind of tenant use is caught, a Kubernetes one is not.
    assert tenant_namespace_uses("engine/x.sql", "WHERE t.namespace = %(namespace)s")
    assert tenant_namespace_uses("blueprints/x.py", "rows = read(db, identity.namespace)")
    assert tenant_namespace_uses("engine/x.py", "def read(db, namespace):\n    pass\n")
    assert tenant_namespace_uses("engine/x.py", "n = {'namespace': ws, 'project': p}")
    assert tenant_namespace_uses("x.sql", "jsonb_build_object('namespace', ns, 'project', p)")
    assert not tenant_namespace_uses("engine/runners/direct.py", "def f(namespace):\n    pass\n")
    assert not tenant_namespace_uses("engine/x.py", "meta['namespace'] = ctx.target_namespace")
