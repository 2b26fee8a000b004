"""The hypermedia routes against the real server: CSRF on writes, Origin on websocket handshakes,
GETs that never change state, no cross-project leakage, small frames."""

import json
import re

import pytest
import requests
import websocket

from tests.e2e.conftest import image, open_pane, server_factory
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(request, start_server, tmp_path):
    """CSRF, Origin and project checks do not depend on the auth mode: dev mode only."""
    return server_factory(request, start_server, tmp_path, "dev")


def session_with_token(base: str, project: str) -> tuple[requests.Session, str]:
    """A browser-like session: its cookie and the CSRF token the page rendered for it."""
    session = requests.Session()
    page = session.get(f"{base}/projects/{project}", timeout=10)
    assert page.status_code == 200
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)
    return session, token


def test_page_writes_need_the_sessions_csrf_token(server, api):
    srv = server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    api(srv).wait(task["id"], "applying")
    session, token = session_with_token(srv.base, "shop")
    url = f"{srv.base}/tasks/{task['id']}/cancel"

    assert session.post(url, timeout=10).status_code == 403
    assert session.post(url, headers={"X-CSRF-Token": "forged"}, timeout=10).status_code == 403
    # Another browser's token is no good either: it is bound to that browser's session.
    _, other_token = session_with_token(srv.base, "shop")
    assert session.post(url, headers={"X-CSRF-Token": other_token}, timeout=10).status_code == 403
    assert api(srv).get(task["id"])["cancelRequestedAt"] is None

    answer = session.post(url, headers={"X-CSRF-Token": token}, timeout=10)
    assert answer.status_code == 200
    # The answer is this task's chip, reading cancelling (or already cancelled).
    assert f'id="chip-{task["id"]}"' in answer.text
    assert "Cancelling…" in answer.text or "Cancelled" in answer.text
    api(srv).wait(task["id"], "cancelled")
    # Both workers share the key that signs the session: the token works on either of them.
    served = set()
    for _ in range(60):
        fresh = requests.post(
            url,
            cookies=session.cookies,
            timeout=10,
            headers={"X-CSRF-Token": token, "Connection": "close"},
        )
        assert fresh.status_code == 200
        served.add(fresh.headers["X-Served-By"])
        if len(served) == 2:
            break
    assert len(served) == 2


def test_websocket_handshakes_check_origin(server, api):
    srv = server()
    task = api(srv).create("shop", image("web"))
    url = f"ws://127.0.0.1:{srv.port}/ws/tasks/{task['id']}/timeline"
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{srv.port + 1}"):
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(url, origin=origin, timeout=5)
        assert refused.value.status_code == 403
    # No Origin at all is refused the same way (not merely "some failure": a 500 would pass).
    with pytest.raises(websocket.WebSocketBadStatusException) as no_origin:
        websocket.create_connection(url, suppress_origin=True, timeout=5)
    assert no_origin.value.status_code == 403
    # An unknown task is refused before the upgrade too.
    with pytest.raises(websocket.WebSocketBadStatusException) as missing:
        websocket.create_connection(
            url.replace(task["id"], "6f1b1c1e-0000-4000-8000-000000000000"),
            origin=srv.base,
            timeout=5,
        )
    assert missing.value.status_code == 404

    ws = websocket.create_connection(url, origin=srv.base, timeout=10)
    try:
        frames = []

        def bootstrapped() -> bool:
            raw = ws.recv()
            assert len(raw) < 8192  # one event or one section per frame
            frames.append(json.loads(raw))
            return frames[-1]["t"] == "ready"

        wait_for(bootstrapped, 60, interval=0, message="the bootstrap's ready frame")
        assert frames[0]["t"] == "reset"
        seqs = [f["seq"] for f in frames if f.get("seq")]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
        # Then live: every new event arrives once, as its own frame.
        api(srv).wait(task["id"], "completed")
        live = []

        def completed_shown() -> bool:
            live.append(json.loads(ws.recv()))
            return "Completed" in live[-1].get("html", "")

        wait_for(completed_shown, 60, interval=0, message="the Completed frame")
        new = [f["seq"] for f in live if f.get("seq")]
        assert new and not set(new) & set(seqs) and len(new) == len(set(new))
    finally:
        ws.close()


def test_gets_never_change_state(server, api, sql_conn):
    srv = server()
    failed = api(srv).create("shop", image("web", marker="sandbox-apply-error"))
    api(srv).wait(failed["id"], "failed")

    def state():
        return (
            sql_conn.execute(
                "SELECT t::text AS row, (SELECT count(*) FROM deploy_task_events e"
                " WHERE e.task_id = t.id) AS events FROM deploy_tasks t ORDER BY id"
            ).fetchall()
            + sql_conn.execute(
                "SELECT p::text AS row FROM projects p ORDER BY project_id"
            ).fetchall()
        )

    before = state()
    session = requests.Session()
    hx = {"HX-Request": "true"}
    for path in (
        "/",
        "/projects/shop",
        f"/projects/shop?task={failed['id']}&deploy=image",
        f"/tasks/{failed['id']}/timeline",
        f"/tasks/{failed['id']}/edit",
        "/projects/shop/deploy/image",
        "/panes/close",
        "/projects/never-started",
    ):
        assert session.get(srv.base + path, headers=hx, timeout=10).status_code == 200, path
    with session.get(f"{srv.base}/projects/shop/stream", stream=True, timeout=10) as stream:
        next(stream.iter_lines())
    assert state() == before


def test_the_project_stream_is_scoped_to_its_project(server, api):
    srv = server()
    mine = api(srv).create("shop", image("mine"))
    theirs = api(srv).create("other", image("theirs"))
    seen = []
    with requests.get(f"{srv.base}/projects/shop/stream", stream=True, timeout=20) as stream:
        lines = stream.iter_lines(decode_unicode=True)
        later = None
        for line in lines:
            seen.append(line)
            if later is None and mine["id"] in line:
                later = api(srv).create("other", image("later"))
                api(srv).create("shop", image("mine-too"))
            if later is not None and "mine-too" in line:
                break
    text = "\n".join(seen)
    assert mine["id"] in text
    assert theirs["id"] not in text and later["id"] not in text
    page = requests.get(f"{srv.base}/projects/shop", timeout=10).text
    assert mine["id"] in page and theirs["id"] not in page
    # Each SSE message carries one task's fragments (or one reset / the cards).
    messages = "\n".join(seen).split("\n\n")
    assert max(len(m) for m in messages) < 8192


def test_the_pages_work_under_their_content_security_policy(server, browser):
    srv = server()
    context = browser.new_context()  # no bypass: the policy the server sends is enforced
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        response = page.goto(f"{srv.base}/projects/csp")
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self';" in csp
        page.wait_for_selector("body[data-stream-open='1']")  # htmx and js/main.js ran, SSE is up
        page.click("[data-deploy=image]")
        page.wait_for_selector(open_pane("image"))
        page.fill("#f-image", "nginx:1.27")
        page.fill("#f-name", "web")
        page.click("#pane button[type=submit]")
        page.wait_for_selector("#timeline-pane[data-task-id][data-live]")  # the websocket is up
        task_id = page.get_attribute("#timeline-pane", "data-task-id")
        page.wait_for_selector(f"#chip-{task_id}[data-status=completed]", timeout=20_000)
        assert errors == []
        # The detector works: an inline script is refused, and that shows up as an error.
        try:
            page.add_script_tag(content="window.inlineRan = true")
        except Exception:
            pass
        assert any("Content Security Policy" in e for e in errors), errors
    finally:
        context.close()


def test_the_api_docs_render_their_operations_under_their_content_security_policy(server, browser):
    srv = server()
    spec = requests.get(f"{srv.base}/api/v1/openapi.json", timeout=10).json()
    assert "paths" in spec, spec
    operation_ids = [
        op["operationId"]
        for path in spec["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    ]
    assert operation_ids
    context = browser.new_context()  # no bypass: the policy the server sends is enforced
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # No outside fetch: every request the page makes goes to the site (or is a data: URL).
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        response = page.goto(f"{srv.base}/api/docs")
        csp = response.headers["content-security-policy"]
        # This page's own policy: the site's, plus a data: font.
        assert "script-src 'self';" in csp and "'unsafe-eval'" not in csp
        assert "frame-ancestors 'none'" in csp and "font-src 'self' data:;" in csp
        # Redoc fetched the document and rendered every operation (not only its shell). Its menu
        # draws the entries near the viewport only, so the page is scrolled through to its end.
        wanted = {f"/{operation_id.lower()}" for operation_id in operation_ids}
        page.wait_for_function(  # an operation is listed: the document is read and drawn
            "() => [...document.querySelectorAll(\"a[href^='#/']\")]"
            ".some(a => a.getAttribute('href').split('/').length > 2)",
            timeout=20_000,
        )
        listed: set[str] = set()
        for _ in range(200):
            listed |= {
                href.rsplit("/", 1)[-1]
                for href in page.eval_on_selector_all(
                    "a[href^='#/']", "links => links.map(a => a.getAttribute('href'))"
                )
            }
            if {w.lstrip("/") for w in wanted} <= listed:
                break
            page.mouse.wheel(0, 600)
            page.wait_for_timeout(50)  # a frame for the menu to draw what came into view
        assert {w.lstrip("/") for w in wanted} <= listed, sorted(wanted - {"/" + x for x in listed})
        page.wait_for_load_state("networkidle")
        assert errors == []
        assert requested and all(url.startswith((srv.base + "/", "data:")) for url in requested), (
            requested
        )
        # The detector works: an inline script is refused, and that shows up as an error.
        try:
            page.add_script_tag(content="window.inlineRan = true")
        except Exception:
            pass
        assert any("Content Security Policy" in e for e in errors), errors
    finally:
        context.close()
