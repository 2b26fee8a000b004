"""The dashboard under real use, in headless Chromium against the real server: a layout that never
spills sideways (long titles, hundreds of tasks, phone width), live logs and progress, a busy
project's dock and canvas, errors in plain words, the keyboard, and zero console errors.

Many tasks are arranged with one SQL statement (fast), never through the browser."""
import pytest

from tests.e2e.conftest import NARROW, WIDE, image

pytestmark = pytest.mark.e2e

FULL_HD = {"width": 1920, "height": 1080}
LONG_TITLE = "a-very-long-deployment-name-" * 7 + "end"  # 199 characters, no space to wrap at
assert len(LONG_TITLE) >= 196

#: Overflow check: the document never scrolls sideways (1 px of rounding allowed).
OVERFLOW = ("() => ({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
            " view: window.innerWidth})")


def seed(sql_conn, project: str, n: int) -> None:
    """n tasks of one project in a dashboard's usual mix, straight into the table."""
    sql_conn.execute("""
        INSERT INTO deploy_tasks (namespace, project_id, created_by, source_kind, runner, status,
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
    """, {"project": project, "n": n})


def no_overflow(ui) -> dict:
    sizes = ui.page.evaluate(OVERFLOW)
    assert sizes["doc"] <= sizes["view"] + 1 and sizes["body"] <= sizes["view"] + 1, sizes
    return sizes


@pytest.mark.parametrize("viewport", [NARROW, WIDE, FULL_HD], ids=["390", "1280", "1920"])
def test_no_horizontal_overflow_with_a_long_title_and_200_tasks(server, open_page, api, sql_conn,
                                                               viewport):
    srv = server()
    long_task = api(srv.base).create("busy", image(LONG_TITLE[:63].rstrip("-"), marker=""))
    sql_conn.execute("UPDATE deploy_tasks SET source = source || jsonb_build_object('name', %s::text)"
                     " WHERE id = %s", (LONG_TITLE, long_task["id"]))
    api(srv.base).wait(long_task["id"], "completed", "failed")
    # The long title alone.
    ui = open_page(srv, "busy", viewport=viewport)
    ui.shot("long-title")
    no_overflow(ui)
    ui.open_timeline(long_task["id"])
    ui.shot("long-title-timeline")
    no_overflow(ui)
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
    assert dock.evaluate("e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY)"
                         " || ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)")
    # The deploy buttons stay on screen.
    for button in ui.page.locator("[data-deploy]").all():
        box = button.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1, box
    ui.page.click("[data-deploy=image]")
    ui.page.wait_for_selector("#pane.is-open")
    ui.shot("200-tasks-deploy-pane")
    no_overflow(ui)
    ui.assert_no_errors()
