"""AUTH_MODE=oidc in Chromium against a real OpenID Connect provider (oidc-provider-mock on
127.0.0.1): sign-in, the workspace picker, another user's workspace, signing out, and a page
whose session is gone."""

import pytest

from tests.e2e.conftest import browser_sign_in, image, server_factory

pytestmark = pytest.mark.e2e


def create_as(page, project: str, source: dict) -> str:
    """Create a task as the page's signed-in user, in the page's workspace; its id."""
    return page.evaluate(
        """async ([project, source]) => {
            const token = document.querySelector('meta[name="csrf-token"]').content;
            const r = await fetch('/api/v1/tasks', {method: 'POST', body: JSON.stringify(
                {projectId: project, source}), headers: {'Content-Type': 'application/json',
                'X-CSRF-Token': token}});
            if (r.status !== 201) throw new Error(r.status + ' ' + await r.text());
            return (await r.json()).id;
        }""",
        [project, source],
    )


@pytest.fixture
def oidc_server(request, start_server, tmp_path):
    return server_factory(request, start_server, tmp_path, "oidc")


def test_sign_in_switch_workspace_and_sign_out(oidc_server, browser, api, shots):
    srv = oidc_server()
    task = api(srv).create("shop", image("web"))  # alice, in her first workspace (team-a)
    alice = browser.new_context(bypass_csp=True).new_page()
    browser_sign_in(alice, srv, "alice", "/projects/shop")
    alice.wait_for_selector(f"#chip-{task['id']}")
    assert alice.locator(".topbar [data-user]").inner_text() == "alice"
    picker = alice.locator("[data-workspace-picker] select")
    assert picker.input_value() == "team-a"
    shots.take(alice, "signed-in")

    picker.select_option("team-b")  # submits itself
    alice.wait_for_url(srv.base + "/")
    assert alice.locator("[data-workspace-picker] select").input_value() == "team-b"
    # what the server lists for the workspace
    landing = alice.context.request.get(srv.base + "/").text()
    assert "data-project-link" not in landing and 'href="/projects/shop"' not in landing
    alice.goto(srv.base + "/projects/shop")
    alice.wait_for_function("document.body.dataset.streamOpen === '1'")
    # The control: a task of this workspace created now arrives, after the stream's bootstrap.
    alice.wait_for_selector(f"#chip-{create_as(alice, 'shop', image('later'))}")
    assert alice.locator(f"#chip-{task['id']}").count() == 0

    bob = browser.new_context(bypass_csp=True).new_page()
    browser_sign_in(bob, srv, "bob", "/projects/shop")
    bob.wait_for_function("document.body.dataset.streamOpen === '1'")
    assert bob.locator("[data-workspace]").inner_text() == "workspace team-c"
    bob.wait_for_selector(f"#chip-{create_as(bob, 'shop', image('bobs'))}")  # the control
    assert bob.locator(f"#chip-{task['id']}").count() == 0
    assert bob.goto(f"{srv.base}/tasks/{task['id']}/timeline").status == 404

    alice.click(".sign-out button")
    alice.wait_for_url(srv.base + "/signed-out")
    assert "Signed out" in alice.locator("main h1").inner_text()
    alice.goto(srv.base + "/projects/shop")
    alice.wait_for_url(srv.provider + "/**")  # anonymous again: off to the provider


def test_a_page_whose_session_ended_shows_signed_out(oidc_server, browser, api, shots):
    srv = oidc_server()
    task = api(srv).create("shop", image("api", marker="sandbox-never-ready"))
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    browser_sign_in(page, srv, "alice", "/projects/shop")
    page.wait_for_selector(f"#chip-{task['id']}[data-status=applying]")
    assert page.locator("#signed-out").is_hidden()

    context.clear_cookies()  # the session is gone (expired, or signed out elsewhere)
    page.locator(f"#chip-{task['id']} [data-action=cancel]").click()
    page.wait_for_selector("#signed-out:not([hidden])")
    shots.take(page, "signed-out")
    assert page.locator("#signed-out a").get_attribute("href") == "/login?next=%2Fprojects%2Fshop"
    assert api(srv).get(task["id"])["cancelRequestedAt"] is None
