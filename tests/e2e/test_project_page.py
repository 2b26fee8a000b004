"""The project page against the real server, in headless Chromium: live dock, canvas and timeline;
cancel from every surface; redeploy, edit & redeploy, the overwrite dialog; blocked inputs;
two browsers on one project. Each test saves screenshots of the states it passes through."""

import os
import re
import signal
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import NARROW, image, open_pane
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def worker_pids(master: int) -> list[int]:
    """The gunicorn master's worker processes."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            pids.append(int(stat.parent.name))
    return pids


def statuses(shown):
    """The distinct statuses in the order they were shown."""
    seen = []
    for status, _ in shown:
        if not seen or seen[-1] != status:
            seen.append(status)
    return seen


def test_deploy_an_image_and_watch_the_chip_go_running_applying_completed(server, open_page):
    srv = server()
    ui = open_page(srv, "shop")
    ui.shot("empty")
    ui.page.evaluate("window.__noReload = true")
    ui.page.click("[data-deploy=image]")
    ui.page.wait_for_selector(open_pane())
    ui.shot("image-pane")
    # The tab swaps in a fresh pane: fill that one, not the one it replaces.
    ui.page.eval_on_selector("#pane", "pane => { pane.dataset.replaced = '1'; }")
    ui.page.click("#pane [data-pane-kind=image]")
    ui.page.wait_for_selector(open_pane("image") + ":not([data-replaced])")
    task_id = ui.deploy_image("nginx:1.27", "web", port="80")
    ui.page.wait_for_selector(f"#chip-{task_id}[data-status=applying]")
    ui.shot("applying")
    ui.wait_chip(task_id, "completed")
    ui.page.wait_for_selector(f"#tl-head-{task_id}[data-status=completed]")
    ui.shot("completed")

    assert ui.page.evaluate("window.__noReload") is True  # live: never reloaded
    shown = ui.shown(task_id)
    # In lifecycle order, never back, ending applying -> completed. `running` lasts only until
    # the runner's first write (milliseconds), so the stream's `applying` frame can reach the page
    # before the create's own answer, and the newer version wins (static/js/fragments.js): the
    # chip may first be drawn applying.
    assert statuses(shown) in (
        ["queued", "running", "applying", "completed"],
        ["running", "applying", "completed"],
        ["applying", "completed"],
    )
    assert ("completed", "Completed") in shown
    # The same states reached the timeline header over the websocket.
    assert statuses(ui.shown(task_id, "tl-head"))[-2:] == ["applying", "completed"]
    # Result resources are cards; a healthy resource's "Running" is green, not progress-blue.
    card = ui.page.locator("[data-resource='Deployment/web']")
    assert card.get_attribute("class").split()[1] == "tone-green"
    assert "Running" in card.inner_text()
    assert "tone-green" in ui.chip(task_id).get_attribute("class")
    # The finished deployment's placeholder left the canvas; its steps are all done.
    assert ui.page.locator(f"#ph-{task_id}").count() == 0
    assert ui.page.locator(f"#tl-steps-{task_id} [data-state=done]").count() == 3
    ui.assert_no_errors()


def _cancel_flow(ui, api, srv, task_id, click):
    ui.wait_chip(task_id, "applying")
    click()
    ui.wait_chip(task_id, "cancelled")
    shown = ui.shown(task_id)
    labels = [label for _, label in shown]
    assert "Cancelling…" in labels, shown
    assert labels.index("Cancelling…") < labels.index("Cancelled")
    assert api(srv).get(task_id)["status"] == "cancelled"
    chip = ui.chip(task_id)
    assert "needs-attention" not in chip.get_attribute("class")  # cancelled needs no attention
    assert chip.locator("[data-action=redeploy]").count() == 1
    ui.assert_no_errors()


def test_cancel_from_the_dock_chip(server, open_page, api):
    srv = server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    ui.wait_chip(task["id"], "applying")
    ui.shot("applying")
    # A double click is harmless and silent: one request, no error, no flash.
    _cancel_flow(
        ui,
        api,
        srv,
        task["id"],
        lambda: ui.chip(task["id"]).locator("[data-action=cancel]").dblclick(),
    )
    assert ui.page.locator("#flash").is_hidden()
    ui.shot("cancelled")


def test_cancel_from_the_timeline_header(server, open_page, api):
    srv = server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    head = ui.open_timeline(task["id"])
    # Cancel once every document is applied (readiness is being verified), not at "applying",
    # which comes before the first apply: the outcome below lists the applied Deployment.
    ui.page.wait_for_selector(f"#tl-steps-{task['id']} [data-step=verify][data-state=started]")
    _cancel_flow(ui, api, srv, task["id"], lambda: head.locator("[data-action=cancel]").click())
    ui.page.wait_for_selector(f"#tl-head-{task['id']}[data-status=cancelled]")
    head_labels = [label for _, label in ui.shown(task["id"], "tl-head")]
    assert "Cancelling…" in head_labels and head_labels[-1] == "Cancelled"
    # The timeline itemizes what the cancelled run applied (nothing was deleted).
    outcome = ui.page.locator(f"#tl-outcome-{task['id']}")
    assert outcome.locator("[data-applied='Deployment/api']").count() == 1
    assert ui.page.locator(f"#tl-events-{task['id']} [data-kind=cancel_requested]").count() == 1
    ui.shot("cancelled-timeline")


def test_cancel_from_the_placeholder_menu_and_placement_is_saved(server, open_page, api):
    srv = server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    node = ui.page.locator(f"#ph-{task['id']}")
    node.wait_for()
    ui.wait_chip(task["id"], "applying")
    # Let the run settle in its last phase (never ready: it waits in verify), so no update
    # re-renders the placeholder under the pointer.
    settled = wait_for(
        lambda: (s := api(srv).get(task["id"]))["phase"] == "verify" and s, 15, message="verify"
    )
    version = int(datetime.fromisoformat(settled["updatedAt"]).timestamp() * 1_000_000)
    ui.page.wait_for_selector(
        f"#ph-{task['id']}[data-version='{version}'] [data-drag]", state="visible"
    )
    # Drag the placeholder: its placement is saved (PATCH .../canvas) and never touches status.
    # The placeholder may still be drawn again (the stream's bootstrap redraws every one, and a
    # frame of the same version replaces it): a box read as the node is replaced is None.
    grip = wait_for(lambda: node.locator("[data-drag]").bounding_box(), 15, message="grip box")
    ui.page.mouse.move(grip["x"] + 4, grip["y"] + 4)
    ui.page.mouse.down()
    ui.page.mouse.move(grip["x"] + 164, grip["y"] + 94, steps=8)
    ui.page.mouse.up()
    moved = api(srv)
    snap = moved.wait(task["id"], "applying")
    canvas = wait_for(lambda: moved.get(task["id"])["canvas"], 15, message="canvas saved")
    assert canvas["x"] > 100 and canvas["y"] > 60
    assert moved.get(task["id"])["status"] == snap["status"] == "applying"
    node.locator("summary").click()
    ui.shot("placeholder-menu")
    assert node.locator("[data-action=open-timeline]").is_visible()
    _cancel_flow(ui, api, srv, task["id"], lambda: node.locator("[data-action=cancel]").click())
    assert "Cancelling…" in [label for _, label in ui.shown(task["id"], "placeholder")]
    node.wait_for(state="detached")  # a finished deployment leaves the canvas


def test_a_failed_deployment_redeploys_in_one_click_and_its_chip_is_superseded(
    server, open_page, api
):
    srv = server()
    failed = api(srv).create("shop", image("web", marker="sandbox-apply-error"))
    ui = open_page(srv, "shop")
    chip = ui.wait_chip(failed["id"], "failed")
    assert "needs-attention" in chip.get_attribute("class")
    assert "Needs attention" in chip.inner_text()
    ui.shot("failed-needs-attention")
    dialogs = []
    ui.page.on("dialog", lambda d: dialogs.append(d))

    chip.locator("[data-action=redeploy]").click()  # nothing was applied: no dialog
    ui.page.wait_for_selector(f"#chip-{failed['id']}.is-superseded")
    assert not dialogs and not ui.page.locator("#confirm-dialog").is_visible()
    clone = next(t for t in api(srv).list("shop") if t["id"] != failed["id"])
    assert clone["retriedFromTaskId"] == failed["id"]
    ui.chip(clone["id"]).wait_for()
    superseded = ui.chip(failed["id"])
    assert "needs-attention" not in superseded.get_attribute("class")
    assert superseded.locator("[data-action=redeploy]").count() == 0
    assert "Redeployed" in superseded.inner_text()
    # The new run opened in the timeline pane, linked to its predecessor.
    ui.page.wait_for_selector(f"#timeline-pane[data-task-id='{clone['id']}']")
    assert (
        ui.page.locator(f"#tl-head-{clone['id']} .tl-meta").inner_text().endswith(failed["id"][:8])
    )
    ui.wait_chip(clone["id"], "failed")  # same source, same simulated error
    ui.shot("superseded-and-clone-failed")

    # A dismissal is kept on the server and survives a reload.
    ui.chip(failed["id"]).locator("[data-action=dismiss]").click()
    ui.chip(failed["id"]).wait_for(state="detached")
    ui.open()
    ui.chip(clone["id"]).wait_for()
    # The control: a task created after the reload arrived through the stream, after the
    # stream's bootstrap (which would re-insert the dismissed chip were it not remembered).
    later = api(srv).create("shop", image("later"))
    ui.chip(later["id"]).wait_for()
    assert ui.chip(failed["id"]).count() == 0
    ui.assert_no_errors()


def test_edit_and_redeploy_with_a_changed_field(server, open_page, api):
    srv = server()
    source = {
        **image("web", marker="sandbox-apply-error"),
        "env": {"LOG_LEVEL": "debug", "API_TOKEN": "tok-very-secret-1"},
    }
    failed = api(srv).create("shop", source)
    ui = open_page(srv, "shop")
    ui.wait_chip(failed["id"], "failed")
    head = ui.open_timeline(failed["id"])
    head.locator("[data-action=edit-redeploy]").click()
    pane = ui.page.locator(open_pane("image"))
    pane.wait_for()
    ui.shot("edit-pane")
    # Prefilled from the predecessor's source, target locked; secrets never prefilled.
    assert ui.page.input_value("#f-image") == source["image"]
    assert ui.page.input_value("#f-name") == "web"
    assert ui.page.input_value("#f-env") == "LOG_LEVEL=debug"
    assert "(locked)" in pane.locator(".target").inner_text()
    secret = pane.locator("input[name='s:env:API_TOKEN']")
    assert secret.input_value() == "" and secret.get_attribute("required") is not None
    assert "tok-very-secret-1" not in ui.page.content()

    ui.page.fill("#f-image", "nginx:1.27")
    secret.fill("tok-very-secret-2")
    pane.locator("button[type=submit]").click()
    # The secret env went to the cluster as a Secret before the failure: the overwrite guard.
    ui.page.wait_for_selector("#confirm-dialog[open]")
    assert "Secret/web-env" in ui.page.inner_text("#confirm-message")
    ui.page.click("#confirm-dialog [data-confirm-ok]")
    ui.page.wait_for_function(
        f"document.querySelector('#timeline-pane').dataset.taskId !== '{failed['id']}'"
    )
    clone_id = ui.page.get_attribute("#timeline-pane", "data-task-id")
    ui.wait_chip(clone_id, "completed")
    ui.shot("edited-clone-completed")
    clone = api(srv).get(clone_id)
    assert clone["retriedFromTaskId"] == failed["id"]
    assert clone["projectId"] == "shop"
    assert clone["source"]["image"] == "nginx:1.27"
    assert "API_TOKEN" in clone["sensitiveKeys"]
    assert "tok-very-secret-2" not in str(clone)
    assert "is-superseded" in ui.chip(failed["id"]).get_attribute("class")
    ui.assert_no_errors()


def test_the_overwrite_confirm_dialog_guards_redeploys_over_applied_resources(
    server, open_page, api
):
    srv = server(READINESS_TIMEOUT_S="2")
    failed = api(srv).create("shop", image("db", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    chip = ui.wait_chip(failed["id"], "failed")
    assert api(srv).get(failed["id"])["hasAppliedResources"]
    dialog = ui.page.locator("#confirm-dialog")

    chip.locator("[data-action=redeploy]").click()
    dialog.wait_for(state="visible")
    assert "overwritten" in ui.page.inner_text("#confirm-message")
    assert "Deployment/db" in ui.page.inner_text("#confirm-message")
    ui.shot("overwrite-dialog")
    redeploys = []
    ui.page.on(
        "request",
        lambda r: redeploys.append(r.url) if r.method == "POST" and "/redeploy" in r.url else None,
    )
    dialog.locator("button[value=cancel]").click()
    dialog.wait_for(state="hidden")

    # The same guard on the timeline header and on the edit pane.
    head = ui.open_timeline(failed["id"])
    # Kept: nothing was sent or created. The timeline's requests went out after the cancel and
    # were answered, so a redeploy the cancel had let through would have been seen first.
    assert redeploys == []
    assert len(api(srv).list("shop")) == 1
    assert head.locator("[data-action=redeploy]").get_attribute("hx-confirm")
    head.locator("[data-action=edit-redeploy]").click()
    ui.page.wait_for_selector(open_pane() + " form[hx-confirm]")
    # Confirmed once, by the dialog on submit: no second warning banner in the pane.
    assert ui.page.locator("#pane [data-overwrite-warning]").count() == 0
    assert ui.page.locator("#pane form").get_attribute("hx-confirm")
    ui.page.click("#pane .pane-head button")

    chip.locator("[data-action=redeploy]").click()
    dialog.wait_for(state="visible")
    dialog.locator("[data-confirm-ok]").click()
    ui.page.wait_for_selector(f"#chip-{failed['id']}.is-superseded")
    assert len(api(srv).list("shop")) == 2
    assert len(redeploys) == 1  # the recorder's control: a confirmed redeploy is seen
    ui.assert_no_errors()


def test_a_blocked_template_is_answered_through_the_form(server, open_page, api):
    srv = server()
    # Arranged through the API: a template missing its required password parks blocked.
    task = api(srv).create(
        "shop", {"kind": "template", "template": "postgresql", "args": {"database": "orders"}}
    )
    api(srv).wait(task["id"], "blocked")
    ui = open_page(srv, "shop")
    chip = ui.wait_chip(task["id"], "blocked")
    assert "Waiting for your input" in chip.inner_text()
    assert chip.locator("[data-action=dismiss]").count() == 0  # blocked keeps its reminder
    ui.open_timeline(task["id"])
    form = ui.page.locator(f"[data-input-form='{task['id']}']")
    form.wait_for()
    password = form.locator("input[name='f:password']")
    assert password.get_attribute("type") == "password"
    assert password.input_value() == "" and password.get_attribute("required") is not None
    # Non-sensitive inputs are prefilled from their declared defaults.
    assert form.locator("input[name='f:version']").input_value() == "17"
    ui.shot("blocked-form")

    password.fill("pw-never-stored-42")
    form.locator("button[type=submit]").click()
    ui.wait_chip(task["id"], "completed")
    ui.shot("blocked-answered-completed")
    statuses_seen = statuses(ui.shown(task["id"]))
    assert statuses_seen[0] == "blocked" and statuses_seen[-1] == "completed"
    snap = api(srv).get(task["id"])
    assert "pw-never-stored-42" not in str(snap) and "pw-never-stored-42" not in ui.page.content()
    assert snap["source"]["args"].get("database") == "orders"  # untouched inputs are kept
    ui.assert_no_errors()


def test_two_browsers_on_one_project_see_each_others_actions_live(server, open_page, api):
    srv = server()
    alice = open_page(srv, "team")
    bob = open_page(srv, "team")
    # Alice deploys; Bob's dock and canvas follow without a reload.
    task_id = alice.deploy_image("nginx:1.27", "site")
    bob.chip(task_id).wait_for()
    bob.wait_chip(task_id, "completed")
    assert "running" in statuses(bob.shown(task_id)) or "applying" in statuses(bob.shown(task_id))
    bob.page.wait_for_selector("[data-resource='Deployment/site']")
    # Bob cancels a slow one; Alice sees it cancelled.
    slow = api(srv).create("team", image("batch", marker="sandbox-never-ready"))
    alice.wait_chip(slow["id"], "applying")
    bob.wait_chip(slow["id"], "applying").locator("[data-action=cancel]").click()
    alice.wait_chip(slow["id"], "cancelled")
    bob.wait_chip(slow["id"], "cancelled")
    alice.shot("alice-sees-bobs-cancel")
    # Another project's tasks never show here.
    other = api(srv).create("elsewhere", image("x"))
    # The control: a task of this project created after it has arrived (the stream keeps the
    # order of the changes), so the other's would have too.
    later = api(srv).create("team", image("later"))
    alice.chip(later["id"]).wait_for()
    assert alice.chip(other["id"]).count() == 0
    alice.assert_no_errors()
    bob.assert_no_errors()


def test_the_page_rebootstraps_after_its_streams_reconnect(server, open_page, api):
    # No drain wait: the workers abort the never-ready run and close their streams at once.
    srv = server(DRAIN_WAIT_S="0")
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    ui = open_page(srv, "shop")
    ui.open_timeline(task["id"])
    events = ui.page.locator(f"#tl-events-{task['id']} li")
    before = events.count()
    assert before >= 3
    ui.page.evaluate(f"document.querySelector('#tl-events-{task['id']} li').dataset.stale = '1'")
    # A chip no stream frame knows: only a re-bootstrap (reset + snapshot) clears it.
    ui.page.evaluate(
        "document.querySelector('#dock-chips').insertAdjacentHTML("
        "'beforeend', '<article id=\"chip-bogus\" class=\"chip\"></article>')"
    )
    # Restart both workers (SIGTERM: graceful, they close their streams); gunicorn replaces them
    # and the page reconnects and re-bootstraps on the new ones.
    for pid in worker_pids(srv.proc.pid):
        os.kill(pid, signal.SIGTERM)
    ui.page.wait_for_function(
        f"!document.querySelector('#tl-events-{task['id']} li[data-stale]')", timeout=30_000
    )
    ui.page.wait_for_selector("#timeline-pane[data-live]", timeout=30_000)
    assert events.count() >= before
    # The dock's stream reconnected too, and re-bootstrapped.
    ui.page.wait_for_selector("#chip-bogus", state="detached", timeout=30_000)
    # The snapshot's frames may come a batch after the reset's: wait for the chip, then count.
    ui.chip(task["id"]).wait_for(timeout=30_000)
    assert ui.chip(task["id"]).count() == 1
    # The run the restart interrupted is recorded as such, live, on the new worker.
    ui.wait_chip(task["id"], "failed")
    ui.page.wait_for_selector(f"#tl-head-{task['id']}[data-status=failed]")


def test_the_page_is_usable_at_a_narrow_viewport(server, open_page, api):
    srv = server()
    failed = api(srv).create("mobile", image("old", marker="sandbox-apply-error"))
    ui = open_page(srv, "mobile", viewport=NARROW)
    ui.wait_chip(failed["id"], "failed")
    ui.shot("narrow-failed")
    overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    assert ui.page.evaluate(overflow) <= 0
    task_id = ui.deploy_image("nginx:1.27", "phone")
    ui.shot("narrow-deploying")
    ui.wait_chip(task_id, "completed")
    assert ui.page.evaluate(overflow) <= 0
    assert ui.chip(task_id).is_visible()  # the dock stays at hand
    assert ui.page.locator(f"#tl-head-{task_id}").is_visible()
    ui.shot("narrow-completed")
    slow = api(srv).create("mobile", image("slow", marker="sandbox-never-ready"))
    ui.wait_chip(slow["id"], "applying").locator("[data-action=cancel]").click()
    ui.wait_chip(slow["id"], "cancelled")
    ui.shot("narrow-cancelled")
    ui.assert_no_errors()


def test_the_landing_page_lists_projects(server, open_page, api):
    srv = server()
    api(srv).create("alpha", image("a"))
    ui = open_page(srv, "alpha")
    ui.page.goto(srv.base + "/")
    assert ui.page.locator("a", has_text=re.compile("^alpha$")).count() == 1
    ui.page.fill("#project-id", "beta")
    ui.page.click(".open-project button")
    ui.page.wait_for_url(re.compile(r"/projects/beta$"))
    ui.shot("empty-project")
