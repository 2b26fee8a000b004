"""E2E fixtures: the real server (gunicorn, gevent, two workers, the test database, the sandbox
cluster) driven by headless Chromium (Debian's `chromium`, through Playwright's
`executable_path`; no Playwright browser download). `make test` installs both when missing.

Screenshots land in test-artifacts/e2e/ (not committed).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.helpers import ROOT, free_port, poll_status, wait_for

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "e2e"
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
#: Sandbox cadences slow enough that a browser sees every state, fast enough for a test.
SERVER_ENV = {
    "SANDBOX_APPLY_DELAY_S": "0.4",
    "SANDBOX_READY_DELAY_S": "1.5",
    "READINESS_POLL_S": "0.2",
    "ACCESS_LOG": "",
}

#: Installed before any page script: records every state a chip, placeholder or timeline header
#: shows, so a test can assert the sequence (running -> applying -> completed) without racing it.
RECORDER = """
(() => {
  window.__pageId = Math.random().toString(36).slice(2);
  window.__shown = [];
  window.__dockResets = 0;  // a stream bootstrap empties the dock, then fills it again
  const last = new Map();
  const record = (mutations) => {
    mutations.forEach((m) => {
      if (m.target.id === 'dock-chips' && m.removedNodes.length > 1 && !m.addedNodes.length) {
        window.__dockResets += 1;
      }
    });
    document.querySelectorAll('.chip, .placeholder, .tl-head').forEach((el) => {
      const label = el.querySelector('[data-status-label]');
      const state = el.dataset.status + '|' + (label ? label.textContent.trim() : '');
      const key = el.className.split(' ')[0] + ':' + el.dataset.taskId;
      if (last.get(key) !== state) {
        last.set(key, state);
        window.__shown.push({surface: el.className.split(' ')[0], task: el.dataset.taskId,
                             status: el.dataset.status,
                             label: label ? label.textContent.trim() : ''});
      }
    });
  };
  new MutationObserver(record).observe(document, {subtree: true, childList: true,
                                                  attributes: true, characterData: true});
})();
"""


def open_pane(kind: str = "") -> str:
    """The selector of the open deploy pane once htmx has bound it. htmx marks swapped-in content
    `htmx-added` until its settle step (20 ms later, far more on a loaded machine) processes its
    hx- attributes: a tab clicked or a template chosen before that does nothing, and a form
    submitted before that submits natively."""
    return "#pane.is-open" + (f"[data-kind={kind}]" if kind else "") + ":not(.htmx-added)"


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no chromium at {CHROMIUM}: `make test` installs it (apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


#: The test provider's users (oidc mode): alice works in two workspaces, bob in a third.
PROVIDER_USERS = [
    {"sub": "alice", "namespace": ["team-a", "team-b"], "preferred_username": "alice"},
    {"sub": "bob", "namespace": "team-c", "preferred_username": "bob"},
]
CLIENT_ID = "deploy-engine"


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    """A real OpenID Connect provider (oidc-provider-mock) on 127.0.0.1 for the session."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "oidc_provider_mock",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--require-nonce",
    ]
    for user in PROVIDER_USERS:
        argv += ["--user-claims", json.dumps(user)]
    log = open(tmp_path_factory.mktemp("oidc") / "provider.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, "the OIDC provider exited"
        try:
            return requests.get(url + "/.well-known/openid-configuration", timeout=1).ok
        except requests.RequestException:
            return False

    wait_for(up, 30, interval=0.1, message="the OIDC provider")
    yield url
    os.killpg(proc.pid, 9)
    proc.wait(10)
    log.close()


def sign_in(session: requests.Session, base: str, provider: str, user: str) -> None:
    """The browser's Authorization Code flow, walked by an HTTP client (the API helpers use it)."""
    to_provider = session.get(f"{base}/login", allow_redirects=False, timeout=10)
    assert to_provider.status_code == 302 and to_provider.headers["Location"].startswith(provider)
    back = session.post(
        to_provider.headers["Location"], data={"sub": user}, allow_redirects=False, timeout=10
    )
    assert back.status_code == 302, back.text
    landed = session.get(back.headers["Location"], allow_redirects=False, timeout=10)
    assert landed.status_code == 302, landed.text


@pytest.fixture(params=["dev", "oidc"])
def server(request, start_server, tmp_path):
    """Factory: the real server (gunicorn, two gevent workers) with e2e sandbox cadences, in each
    auth mode (oidc: signed in to the test provider as alice)."""
    return server_factory(request, start_server, tmp_path, request.param)


def server_factory(request, start_server, tmp_path, mode: str):
    def factory(**env):
        auth = {}
        if mode == "oidc":
            provider = request.getfixturevalue("oidc_provider")
            auth = {
                "AUTH_MODE": "oidc",
                "OIDC_ISSUER": provider,
                "OIDC_CLIENT_ID": CLIENT_ID,
                "OIDC_CLIENT_SECRET": "e2e-client-secret",
                "SECRET_KEY": "e2e-" * 16,
            }
        srv = start_server(
            "gunicorn",
            workers=2,
            env={**SERVER_ENV, "DATA_DIR": str(tmp_path / "data"), **auth, **env},
        )
        srv.auth_mode = mode
        srv.session = requests.Session()
        if mode == "oidc":
            srv.provider = provider
            sign_in(srv.session, srv.base, provider, "alice")
        return srv

    return factory


class Page:
    """A browser page on one project, with the helpers the tests share."""

    def __init__(self, page, base: str, project: str, shots: "Shots"):
        self.page, self.base, self.project, self.shots = page, base, project, shots
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )

    def open(self, query: str = "") -> "Page":
        self.page.goto(f"{self.base}/projects/{self.project}{query}")
        self.page.wait_for_function("document.body.dataset.streamOpen === '1'")
        return self

    def chip(self, task_id: str):
        return self.page.locator(f"#chip-{task_id}")

    def wait_chip(self, task_id: str, status: str, timeout: float = 60_000):
        self.page.wait_for_selector(f"#chip-{task_id}[data-status={status}]", timeout=timeout)
        return self.chip(task_id)

    def shown(self, task_id: str, surface: str = "chip") -> list[tuple[str, str]]:
        """Every (status, label) one surface of a task showed, in order."""
        return [
            (s["status"], s["label"])
            for s in self.page.evaluate("window.__shown")
            if s["task"] == task_id and s["surface"] == surface
        ]

    def open_timeline(self, task_id: str):
        self.chip(task_id).locator(".chip-open").click()
        # Live (its websocket bootstrapped) and bound by htmx (see open_pane): its buttons work.
        self.page.wait_for_selector(
            f"#timeline-pane[data-task-id='{task_id}'][data-live]:not(.htmx-added)"
        )
        return self.page.locator(f"#tl-head-{task_id}")

    def deploy_image(self, image: str, name: str, port: str = "") -> str:
        """Deploy through the image pane; the new task's id (its timeline opens)."""
        if not self.page.locator(open_pane("image")).count():
            self.page.click("[data-deploy=image]")
        self.page.wait_for_selector(open_pane("image"))
        self.page.fill("#f-image", image)
        self.page.fill("#f-name", name)
        if port:
            self.page.fill("#f-port", port)
        before = self.page.evaluate(
            "document.querySelector('#timeline-pane')"
            " && document.querySelector('#timeline-pane').dataset.taskId"
        )
        self.page.click("#pane button[type=submit]")
        self.page.wait_for_function(
            "(before) => { const p = document.querySelector('#timeline-pane');"
            " return p && p.dataset.taskId && p.dataset.taskId !== before; }",
            arg=before,
        )
        self.page.wait_for_selector("#pane:not(.is-open)", state="attached")
        return self.page.get_attribute("#timeline-pane", "data-task-id")

    def shot(self, name: str) -> None:
        self.shots.take(self.page, name)

    def assert_no_errors(self) -> None:
        assert self.errors == []


class Shots:
    """Screenshots of one test, named <test>-<nn>-<state>.png under test-artifacts/e2e/."""

    def __init__(self, test_name: str):
        self.prefix = re.sub(r"[^a-z0-9_]+", "-", test_name.lower()).strip("-")
        self.count = 0
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(self, page, name: str) -> None:
        self.count += 1
        size = page.viewport_size or {}
        page.screenshot(
            path=str(ARTIFACTS / f"{self.prefix}-{self.count:02d}-{name}-{size.get('width')}w.png")
        )


@pytest.fixture
def shots(request):
    return Shots(request.node.name)


@pytest.fixture
def open_page(browser, shots):
    """Factory: a fresh browser context (its own cookies) showing one project."""
    contexts = []

    def factory(srv, project: str, viewport=WIDE, query: str = "", user: str = "alice") -> Page:
        # The helpers' wait_for_function evaluates strings in the page, which the app's CSP
        # (rightly) forbids; the app's own scripts are checked under the real policy in
        # test_page_security.py::test_the_pages_work_under_their_content_security_policy.
        context = browser.new_context(viewport=viewport, bypass_csp=True)
        context.add_init_script(RECORDER)
        contexts.append(context)
        page = context.new_page()
        if srv.auth_mode == "oidc":
            browser_sign_in(page, srv, user, f"/projects/{project}")
        return Page(page, srv.base, project, shots).open(query)

    yield factory
    for context in contexts:
        context.close()


def browser_sign_in(page, srv, user: str, path: str) -> None:
    """Open `path` anonymously: the server sends the browser to the provider, whose form signs
    `user` in and sends it back to `path`."""
    page.goto(srv.base + path)
    page.wait_for_url(srv.provider + "/**")
    page.fill("input[name=sub]", user)
    page.click("button[type=submit]:not([value=deny])")
    page.wait_for_url(srv.base + path)


@pytest.fixture
def api():
    """Factory: arrange through the JSON API (create, read) of a running server."""

    class Api:
        def __init__(self, srv):
            self.base, self.session = srv.base, srv.session

        def create(self, project: str, source: dict, **body) -> dict:
            r = self.session.post(
                f"{self.base}/api/v1/tasks",
                json={"projectId": project, "source": source, **body},
                timeout=10,
            )
            assert r.status_code == 201, r.text
            return r.json()

        def get(self, task_id: str) -> dict:
            r = self.session.get(f"{self.base}/api/v1/tasks/{task_id}", timeout=10)
            assert r.status_code == 200, r.text
            return r.json()

        def list(self, project: str) -> list[dict]:
            r = self.session.get(
                f"{self.base}/api/v1/tasks", params={"projectId": project}, timeout=10
            )
            return r.json()["items"]

        def wait(self, task_id: str, *statuses: str, timeout: float = 60.0) -> dict:
            return poll_status(
                lambda: self.get(task_id), statuses, timeout, interval=0.1, message=task_id
            )

    return Api


def image(name: str, tag: str = "1.0", marker: str = "") -> dict:
    """An image source; `marker` is a sandbox behaviour (sandbox-never-ready, ...)."""
    ref = f"registry.local/{marker + '-' if marker else ''}app:{tag}"
    return {"kind": "image", "image": ref, "name": name, "port": 8080}


#: axe-core 4.11.0 from the npm registry (package axe-core, axe.min.js, MPL-2.0), test-only.
AXE = Path(__file__).parent / "vendor" / "axe-4.11.0.min.js"
AXE_SHA256 = "e9e5863c33a874f09bc01acd9234b7e3c871479f5eef8802fa582544465e6d01"


def serious_violations(page) -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now."""
    source = AXE.read_bytes()
    assert hashlib.sha256(source).hexdigest() == AXE_SHA256
    if not page.evaluate("() => !!window.axe"):
        # Evaluated as a script through the debugging protocol (no eval in the page: a CSP
        # without 'unsafe-eval' does not stop it).
        page.evaluate(source.decode() + "\n;0")
    return page.evaluate("""async () => {
        const result = await axe.run(document, {resultTypes: ['violations']});
        return result.violations.filter(v => ['serious', 'critical'].includes(v.impact))
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.slice(0, 4).map(n => n.target.join(' '))}));
    }""")
