"""The dashboard under real use, in headless Chromium against the real server: a layout that never
spills sideways (long titles, hundreds of tasks, phone width), live logs and progress, a busy
project's dock and canvas, errors in plain words, the keyboard, and zero console errors.

Many tasks are arranged with one SQL statement (fast), never through the browser."""

import pytest

from engine.readside.store import BOARD_LIMIT
from tests.e2e.conftest import (
    NARROW,
    WIDE,
    image,
    open_pane,
    serious_violations,
    server_factory,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(request, start_server, tmp_path):
    """The dashboard's states and layout do not depend on the auth mode: dev mode only (the
    project page suite runs in both)."""
    return server_factory(request, start_server, tmp_path, "dev")


FULL_HD = {"width": 1920, "height": 1080}
LONG_TITLE = "a-very-long-deployment-name-" * 7 + "end"  # 199 characters, no space to wrap at
assert len(LONG_TITLE) >= 196

#: Overflow check: the document never scrolls sideways (1 px of rounding allowed).
OVERFLOW = (
    "() => ({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
    " view: window.innerWidth})"
)


def seed(sql_conn, project: str, n: int) -> None:
    """n tasks of one project in a dashboard's usual mix, straight into the table."""
    sql_conn.execute(
        """
        INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status,
                                  source, artifact_summary, finished_at, failure_reason,
                                  failure_message, created_at)
        SELECT 'default', %(project)s, 'dev', 'image', 'direct', s.status,
               jsonb_build_object('kind', 'image', 'image', 'nginx:1.' || g,
                                  'name', 'app-' || (g %% 30), 'port', 80),
               jsonb_build_object('appliedResources', jsonb_build_array(
                   jsonb_build_object('kind', 'Deployment', 'name', 'app-' || (g %% 30)),
                   jsonb_build_object('kind', 'Service', 'name', 'app-' || (g %% 30)))),
               now() - make_interval(secs => g),
               CASE WHEN s.status = 'failed' THEN 'apply_failed' END,
               CASE WHEN s.status = 'failed' THEN 'applying Deployment/app-' || (g %% 30)
                    || ' failed: sandbox: simulated apply error' END,
               now() - make_interval(secs => g + 30)
        FROM generate_series(1, %(n)s) g,
             LATERAL (SELECT (CASE WHEN g %% 7 = 0 THEN 'failed' WHEN g %% 11 = 0 THEN 'cancelled'
                                   ELSE 'completed' END)::task_status AS status) s
    """,
        {"project": project, "n": n},
    )


def no_overflow(ui) -> dict:
    sizes = ui.page.evaluate(OVERFLOW)
    assert sizes["doc"] <= sizes["view"] + 1 and sizes["body"] <= sizes["view"] + 1, sizes
    return sizes


@pytest.mark.parametrize("viewport", [NARROW, WIDE, FULL_HD], ids=["390", "1280", "1920"])
def test_no_horizontal_overflow_with_a_long_title_and_200_tasks(
    server, open_page, api, sql_conn, viewport
):
    srv = server()
    long_task = api(srv).create("busy", image(LONG_TITLE[:63].rstrip("-"), marker=""))
    sql_conn.execute(
        "UPDATE deploy_tasks SET source = source || jsonb_build_object('name', %s::text)"
        " WHERE id = %s",
        (LONG_TITLE, long_task["id"]),
    )
    api(srv).wait(long_task["id"], "completed", "failed")
    # The long title alone.
    ui = open_page(srv, "busy", viewport=viewport)
    ui.shot("long-title")
    no_overflow(ui)
    ui.open_timeline(long_task["id"])
    ui.shot("long-title-timeline")
    no_overflow(ui)
    sheet = ui.page.locator("#timeline-pane").bounding_box()
    assert sheet["y"] < viewport["height"] / 3, sheet  # in view at once, not far down the page
    if viewport is NARROW:
        small = ui.page.evaluate("""() => Array.from(document.querySelectorAll(
            '[data-deploy], .chip-open, .chip-actions .btn, .dock-filter, #timeline-pane .btn'))
            .filter(e => e.getClientRects().length)
            .map(e => [e.textContent.trim().slice(0, 20), e.getBoundingClientRect().height])
            .filter(([, h]) => h < 40)""")
        assert small == []  # touch targets of at least 40 px
    chip_title = ui.chip(long_task["id"]).locator(".chip-title")
    assert chip_title.get_attribute("title") == LONG_TITLE  # the full text in a tooltip
    assert chip_title.evaluate("e => e.scrollWidth > e.clientWidth")  # ellipsized
    # Then 200 more tasks.
    seed(sql_conn, "busy", 200)
    ui.open()
    ui.shot("200-tasks")
    no_overflow(ui)
    dock = ui.page.locator("#dock-chips")
    assert dock.evaluate("e => e.scrollHeight > e.clientHeight || e.scrollWidth > e.clientWidth")
    assert dock.evaluate(
        "e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY)"
        " || ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)"
    )
    # The deploy buttons stay on screen.
    for button in ui.page.locator("[data-deploy]").all():
        box = button.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1, box
    ui.page.click("[data-deploy=image]")
    ui.page.wait_for_selector(open_pane())
    ui.shot("200-tasks-deploy-pane")
    no_overflow(ui)
    ui.assert_no_errors()


def test_a_prompt_deploy_shows_the_models_streamed_text_in_the_log(server, open_page, api):
    srv = server(SANDBOX_GATEWAY_DELAY_S="0.03")
    ui = open_page(srv, "ai")
    ui.page.click("[data-deploy=prompt]")
    ui.page.wait_for_selector(open_pane("prompt"))
    ui.page.fill("#f-prompt", "a small web page that says hello")
    ui.page.click("#pane button[type=submit]")
    ui.page.wait_for_selector("#timeline-pane.is-open[data-gateway-stream]")
    task_id = ui.page.get_attribute("#timeline-pane", "data-task-id")
    text = ui.page.locator(f"#tl-model-{task_id}")
    # Text arrives while the run is still going (live, not after the fact).
    ui.page.wait_for_function(
        f"document.querySelector('#tl-model-{task_id}').textContent.length > 0"
    )
    ui.shot("model-text-streaming")
    ui.wait_chip(task_id, "completed")
    ui.page.wait_for_function(
        f"document.querySelector('#tl-model-{task_id}').textContent.includes('nginx:1.27')"
    )
    assert "model turn 1" in text.inner_text()
    # Each step shows as it happened, with its elapsed time; the header counts the steps.
    steps = ui.page.locator(f"#tl-steps-{task_id} .step")
    assert steps.count() >= 3
    assert all(
        t.strip() for t in ui.page.locator(f"#tl-steps-{task_id} .step .elapsed").all_inner_texts()
    )
    assert "step" in ui.page.inner_text(f"#tl-head-{task_id} [data-progress]")
    # The header comes on the timeline's own stream: it may say completed after the chip does.
    ui.page.wait_for_selector(f"#tl-head-{task_id}[data-status=completed]")
    assert "took" in ui.page.inner_text(f"#tl-head-{task_id} .tl-meta")
    # The log followed the run to its end (nobody scrolled up): the pane is scrolled down.
    assert ui.page.evaluate(
        "(p => p.scrollHeight > p.clientHeight + 100)(document.querySelector('#timeline-pane'))"
    )
    assert (
        ui.page.evaluate(
            "(p => p.scrollHeight - p.scrollTop - p.clientHeight)"
            "(document.querySelector('#timeline-pane'))"
        )
        < 40
    )
    ui.shot("model-text-done")
    ui.page.set_viewport_size(NARROW)
    ui.shot("model-text-done")
    ui.assert_no_errors()


#: The streamed-text box's scroll state, read in the page.
LOG_STATE = (
    "(sel) => { const p = document.querySelector(sel); return {top: p.scrollTop,"
    " gap: p.scrollHeight - p.scrollTop - p.clientHeight,"
    " over: p.scrollHeight - p.clientHeight, chars: p.textContent.length}; }"
)


def test_the_log_stops_following_while_the_reader_is_scrolled_up(server, open_page):
    # About 100 chunks: text arrives for ~40 s, room for the three phases below on a loaded
    # machine (each waits for new lines, which stop coming once the answer is complete).
    srv = server(SANDBOX_GATEWAY_DELAY_S="0.4")
    ui = open_page(srv, "ai-log", viewport={"width": 1280, "height": 600})
    ui.page.click("[data-deploy=prompt]")
    ui.page.wait_for_selector(open_pane("prompt"))
    ui.page.fill("#f-prompt", "a small web page that says hello")
    ui.page.click("#pane button[type=submit]")
    ui.page.wait_for_selector("#timeline-pane.is-open[data-gateway-stream]")
    task_id = ui.page.get_attribute("#timeline-pane", "data-task-id")
    log = f"#tl-model-{task_id}"

    def state() -> dict:
        return ui.page.evaluate(LOG_STATE, log)

    def more_text_after(before: dict) -> dict:
        """Wait until new lines arrived (more text, a taller box); the state then."""
        ui.page.wait_for_function(
            f"([sel, chars, over]) => {{ const s = ({LOG_STATE})(sel);"
            " return s.chars >= chars + 48 && s.over > over; }",
            arg=[log, before["chars"], before["over"]],
            timeout=30_000,
        )
        return state()

    # Following: once the text overflows its box, every new line keeps the box at its bottom.
    ui.page.wait_for_function(f"(sel) => ({LOG_STATE})(sel).over > 60", arg=log, timeout=30_000)
    followed = more_text_after(state())
    assert followed["gap"] < 2, followed

    # The reader scrolls up: new lines arrive and the position is kept.
    ui.page.hover(log)
    ui.page.mouse.wheel(0, -5000)
    ui.page.wait_for_function(f"(sel) => ({LOG_STATE})(sel).top === 0", arg=log)
    kept = more_text_after(state())
    assert kept["top"] == 0 and kept["gap"] > 40, kept
    ui.shot("log-scrolled-up")

    # Back at the bottom, following resumes.
    ui.page.mouse.wheel(0, 100_000)
    ui.page.wait_for_function(f"(sel) => ({LOG_STATE})(sel).gap < 2", arg=log)
    resumed = more_text_after(state())
    assert resumed["gap"] < 2, resumed
    ui.wait_chip(task_id, "completed", timeout=90_000)
    ui.assert_no_errors()


def test_the_dock_shows_the_newest_first_whatever_the_titles(server, open_page, api):
    srv = server()
    created = {
        name: api(srv).create("order", image(name))["id"] for name in ("app-2", "app-10", "app-3")
    }  # titles sort apart from creation

    def dock() -> list[str]:
        return ui.page.eval_on_selector_all(
            "#dock-chips [data-task-id]", "chips => chips.map(c => c.dataset.taskId)"
        )

    ui = open_page(srv, "order")
    for task_id in created.values():  # the dock is drawn after the page opens
        ui.chip(task_id).wait_for()
    assert dock() == [created["app-3"], created["app-10"], created["app-2"]]
    # A task created while the page is open goes first too (the live insert keeps the order).
    created["app-11"] = api(srv).create("order", image("app-11"))["id"]
    ui.chip(created["app-11"]).wait_for()
    assert dock() == [created[n] for n in ("app-11", "app-3", "app-10", "app-2")]
    ui.assert_no_errors()


def test_show_older_loads_the_next_page_of_the_dock_in_order(server, open_page, sql_conn):
    srv = server()
    seed(sql_conn, "paged", BOARD_LIMIT + 5)  # one page and five more
    newest_first = [
        str(r["id"])
        for r in sql_conn.execute(
            "SELECT id FROM deploy_tasks WHERE project_id = 'paged'"
            " ORDER BY created_at DESC, id DESC"
        )
    ]
    ui = open_page(srv, "paged")

    def dock() -> list[str]:
        return ui.page.eval_on_selector_all(
            "#dock-chips [data-task-id]", "chips => chips.map(c => c.dataset.taskId)"
        )

    # The page's own HTML shows the first page, then the stream's bootstrap empties the dock and
    # fills it again, in batches: wait for that refill to hold the whole page (a dock that never
    # does times out here), then check its order.
    ui.page.wait_for_function(
        """n => window.__dockResets > 0
               && document.querySelectorAll('#dock-chips [data-task-id]').length === n""",
        arg=BOARD_LIMIT,
    )
    assert dock() == newest_first[:BOARD_LIMIT]
    more = ui.page.locator("#dock-older button[data-action=show-older]")
    assert more.inner_text() == "Show older"
    ui.shot("dock-show-older")
    more.focus()  # a button: the keyboard reaches it
    ui.page.keyboard.press("Enter")
    ui.page.wait_for_selector("#dock-older .dock-end")  # the last page says so...
    assert ui.page.inner_text("#dock-older") == "No older deployments."
    assert more.count() == 0  # ...in place of the control
    # The older chips went in after the first page's, in the board's order, none twice.
    assert dock() == newest_first
    ui.shot("dock-no-older")
    ui.assert_no_errors()


def test_cancel_leaves_no_step_in_progress(server, open_page, api):
    srv = server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    head = ui.open_timeline(task["id"])
    steps = ui.page.locator(f"#tl-steps-{task['id']}")
    ui.page.wait_for_selector(f"#tl-steps-{task['id']} [data-step=verify][data-state=started]")
    assert "In progress" in steps.inner_text()  # positive control
    ui.shot("verifying")
    head.locator("[data-action=cancel]").click()
    ui.page.wait_for_selector(f"#tl-head-{task['id']}[data-status=cancelled]")
    ui.wait_chip(task["id"], "cancelled")
    ui.shot("cancelled")
    assert "In progress" not in steps.inner_text()
    assert "Stopped" in steps.inner_text()
    # Nothing keeps the striped cancelling look once it is cancelled.
    assert ui.page.locator(".is-cancelling").count() == 0
    ui.page.set_viewport_size(NARROW)
    ui.shot("cancelled")
    ui.assert_no_errors()


def test_a_failure_reads_in_plain_words_with_the_raw_detail_behind_a_toggle(server, open_page, api):
    srv = server()
    failed = api(srv).create("shop", image("api", marker="sandbox-apply-error"))
    api(srv).wait(failed["id"], "failed")
    ui = open_page(srv, "shop")
    chip = ui.wait_chip(failed["id"], "failed")
    assert "The cluster refused Deployment/api." in chip.locator(".chip-failure").inner_text()
    assert "simulated apply error" in chip.locator(".chip-failure").get_attribute("title")
    assert "registry.local/sandbox-apply-error-app:1.0" in chip.locator(".chip-meta").inner_text()
    head = ui.open_timeline(failed["id"])
    failure = head.locator("[data-failure]")
    assert "fix the source (edit & redeploy)" in failure.inner_text()
    assert not failure.locator("pre").is_visible()
    failure.locator("summary").click()
    assert "apply_failed" in failure.locator("pre").inner_text()
    ui.shot("failure-explained")
    ui.page.set_viewport_size(NARROW)
    ui.shot("failure-explained")
    ui.page.set_viewport_size(WIDE)
    # A redeploy: the failed chip's "Redeployed" opens its successor's timeline.
    ui.page.keyboard.press("Escape")
    # Read whether it asks first before clicking: once the redeploy lands the chip re-renders
    # superseded, without the button.
    redeploy = chip.locator("[data-action=redeploy]")
    asks_first = redeploy.get_attribute("hx-confirm")
    redeploy.click()
    if asks_first:
        ui.page.click("#confirm-dialog [data-confirm-ok]")
    ui.page.wait_for_selector(f"#chip-{failed['id']}.is-superseded")
    successor = ui.chip(failed["id"]).locator("[data-successor]").get_attribute("data-successor")
    # The redeploy's own answer opens the successor's timeline, and may land after the stream
    # showed the chip superseded: wait for it before closing it, or the Escape closes nothing.
    ui.page.wait_for_selector(f"#timeline-pane.is-open[data-task-id='{successor}']")
    ui.page.keyboard.press("Escape")
    ui.page.wait_for_selector("#timeline-pane:not(.is-open)", state="attached")
    ui.chip(failed["id"]).locator("[data-successor] button").click()
    ui.page.wait_for_selector(f"#timeline-pane.is-open[data-task-id='{successor}']")
    ui.assert_no_errors()


def test_keyboard_walk_chips_timeline_and_deploy_pane(server, open_page, api):
    srv = server()
    ids = [api(srv).create("keys", image(f"k{i}"))["id"] for i in range(3)]
    for task_id in ids:
        api(srv).wait(task_id, "completed")
    ui = open_page(srv, "keys")
    page = ui.page
    newest, middle = ids[2], ids[1]
    # A live redraw just after the page opens (the runs' last events) can swallow a key pressed
    # while the chips are being replaced: the walk starts once a key has landed.
    for _ in range(3):
        ui.chip(newest).locator(".chip-open").focus()
        page.keyboard.press("ArrowRight")
        if page.evaluate("document.activeElement.dataset.openFor") == middle:
            break
    assert page.evaluate("document.activeElement.dataset.openFor") == middle
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("document.activeElement.dataset.openFor") == newest
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#timeline-pane.is-open[data-task-id='{newest}']")
    page.wait_for_function(
        "document.querySelector('#timeline-pane').contains(document.activeElement)"
    )
    for _ in range(8):  # focus stays trapped in the open timeline
        page.keyboard.press("Tab")
        assert page.evaluate(
            "document.querySelector('#timeline-pane').contains(document.activeElement)"
        )
    ui.shot("timeline-keyboard")
    page.keyboard.press("Escape")
    page.wait_for_selector("#timeline-pane:not(.is-open)", state="attached")
    assert page.evaluate("document.activeElement.dataset.openFor") == newest  # back on its chip

    page.focus("[data-deploy=image]")
    page.keyboard.press("Enter")
    page.wait_for_selector(open_pane("image"))
    page.wait_for_function("document.querySelector('#pane').contains(document.activeElement)")
    for _ in range(12):
        page.keyboard.press("Shift+Tab")
        assert page.evaluate("document.querySelector('#pane').contains(document.activeElement)")
    ui.shot("deploy-pane-keyboard")
    page.keyboard.press("Escape")
    page.wait_for_selector("#pane:not(.is-open)", state="attached")
    page.wait_for_function("document.activeElement.dataset.deploy === 'image'")
    ui.assert_no_errors()


def test_the_landing_page_lists_a_started_project_and_checks_ids_without_console_errors(
    server, open_page, api
):
    srv = server()
    ui = open_page(srv, "looked-at", viewport=NARROW)  # only looked at: that records nothing
    ui.page.goto(srv.base + "/")
    ui.page.fill("#project-id", "-bad")
    assert ui.page.evaluate("document.querySelector('#project-id').validity.patternMismatch")
    ui.page.fill("#project-id", "empty-one")
    assert ui.page.evaluate("document.querySelector('#project-id').validity.valid")
    ui.page.click("form.open-project button[type=submit]")
    ui.page.wait_for_url(srv.base + "/projects/empty-one")
    ui.page.goto(srv.base + "/")
    assert ui.page.locator("a[href='/projects/empty-one']").count() == 1
    assert ui.page.locator("a[href='/projects/looked-at']").count() == 0
    ui.shot("landing")
    # Kept by the server for the workspace, not by this browser: a fresh one sees it too.
    other = open_page(srv, "elsewhere", viewport=NARROW)
    other.page.goto(srv.base + "/")
    assert other.page.locator("a[href='/projects/empty-one']").count() == 1
    ui.assert_no_errors()
    other.assert_no_errors()


@pytest.mark.parametrize("viewport", [WIDE, NARROW], ids=["1280", "390"])
def test_axe_finds_no_serious_violations(server, open_page, api, viewport):
    srv = server()
    blocked = api(srv).create(
        "shop", {"kind": "template", "template": "postgresql", "args": {"database": "orders"}}
    )
    done = api(srv).create("shop", image("web"))
    api(srv).wait(blocked["id"], "blocked")
    api(srv).wait(done["id"], "completed")
    ui = open_page(srv, "shop", viewport=viewport)
    found = {}
    ui.page.goto(srv.base + "/")
    ui.shot("axe-landing")
    found["landing"] = serious_violations(ui.page)
    ui.open()
    ui.shot("axe-project")
    found["project"] = serious_violations(ui.page)
    ui.open_timeline(done["id"])
    ui.shot("axe-timeline")
    found["timeline"] = serious_violations(ui.page)
    ui.page.keyboard.press("Escape")
    ui.open_timeline(blocked["id"])
    ui.page.wait_for_selector(f"[data-input-form='{blocked['id']}']")
    ui.shot("axe-blocked-form")
    found["blocked form"] = serious_violations(ui.page)
    ui.page.keyboard.press("Escape")
    ui.page.click("[data-deploy=template]")
    ui.page.wait_for_selector(open_pane())
    ui.shot("axe-deploy-pane")
    found["deploy pane"] = serious_violations(ui.page)
    assert {k: v for k, v in found.items() if v} == {}
    ui.assert_no_errors()


def test_the_canvas_groups_cards_by_deployment_and_a_service_shows_its_endpoint(
    server, open_page, api
):
    srv = server()
    web = api(srv).create("shop", image("web"))
    worker = api(srv).create("shop", image("worker"))
    api(srv).wait(web["id"], "completed")
    api(srv).wait(worker["id"], "completed")
    ui = open_page(srv, "shop")
    group = ui.page.locator(".app-group[data-app=web]")
    assert group.locator(".card").evaluate_all("cs => cs.map(c => c.dataset.resource)") == [
        "Deployment/web",
        "Service/web",
    ]
    assert ui.page.locator(
        ".app-group[data-app=worker] [data-resource='Deployment/worker']"
    ).count()
    endpoint = group.locator("[data-resource='Service/web'] [data-endpoint]").inner_text()
    assert endpoint.startswith("web.") and endpoint.endswith(":8080"), endpoint
    ui.shot("canvas-groups")
    ui.page.set_viewport_size(NARROW)
    ui.shot("canvas-groups")
    ui.page.set_viewport_size(WIDE)
    group.locator("[data-resource='Service/web'] [data-action=open-timeline]").click()
    ui.page.wait_for_selector(f"#timeline-pane.is-open[data-task-id='{web['id']}']")
    ui.assert_no_errors()


def test_deploy_panes_read_in_words_and_default_to_postgresql(server, open_page):
    srv = server()
    ui = open_page(srv, "shop", query="?deploy=database")
    ui.page.wait_for_selector(open_pane("database"))
    assert ui.page.input_value("#f-engine") == "postgresql"
    ui.page.click("#pane [data-pane-kind=template]")
    ui.page.wait_for_selector(open_pane("template"))
    ui.page.select_option("#template-choice", "redis")
    ui.page.wait_for_selector("#pane.is-open [data-field=maxMemory]")
    assert ui.page.inner_text("label[for=f-maxMemory]").startswith("Max memory")
    ui.shot("template-pane-labels")
    ui.assert_no_errors()  # the template <select> swaps the pane without an htmx error
