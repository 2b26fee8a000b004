"""Dismissals last: per user and project, however many, on every browser, until retention purges
the task. Signed-in users of AUTH_MODE=oidc against the test issuer, each browser a test client."""

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.issuer import AUDIENCE

WORKSPACE = "team-a"


@pytest.fixture
def oidc_app(make_app, issuer):
    return make_app(
        auth_mode="oidc",
        oidc_issuer=issuer.url,
        oidc_client_id=AUDIENCE,
        oidc_client_secret="test-client-secret",
        secret_key="test-secret-key-" * 4,
    )


@pytest.fixture
def browser(oidc_app, issuer):
    """Factory: a new browser signed in as `user`, with its CSRF token."""

    def factory(user: str):
        client = oidc_app.test_client()
        sent = client.get("/login", query_string={"next": "/"})
        query = {k: v[0] for k, v in parse_qs(urlsplit(sent.headers["Location"]).query).items()}
        issuer.id_token_claims = issuer.claims(
            user=user, workspaces=(WORKSPACE,), nonce=query["nonce"]
        )
        back = client.get("/auth/callback", query_string={"code": "c", "state": query["state"]})
        assert back.status_code == 302, back.text
        page = client.get("/")
        client.csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)
        return client

    return factory


def dismiss(client, task_id):
    return client.post(f"/tasks/{task_id}/dismiss", headers={"X-CSRF-Token": client.csrf})


def chips_on_page(client, project_id) -> set[str]:
    page = client.get(f"/projects/{project_id}")
    assert page.status_code == 200
    return set(re.findall(r'id="chip-([0-9a-f-]{36})"', page.text))


def chips_in_stream_bootstrap(client, project_id) -> set[str]:
    """The chips the page's live stream sends when it (re)connects: it resets the dock."""
    stream = client.get(f"/projects/{project_id}/stream", buffered=False)
    seen = ""
    for chunk in stream.response:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if 'id="cards"' in seen:  # the bootstrap's last fragment
            break
    stream.close()
    return set(re.findall(r'id=\\?"chip-([0-9a-f-]{36})', seen))


def test_dismissals_last_per_user_and_project_across_browsers(browser, insert_task):
    shop = [str(insert_task("failed", "shop", WORKSPACE)["id"]) for _ in range(60)]
    other = [str(insert_task("failed", "other", WORKSPACE)["id"]) for _ in range(4)]
    alice_laptop, alice_phone, bob = browser("alice"), browser("alice"), browser("bob")
    assert chips_on_page(alice_laptop, "shop") == set(shop)  # the control: all shown

    for task_id in shop + other[:2]:
        answer = dismiss(alice_laptop if task_id in shop[::2] else alice_phone, task_id)
        assert answer.status_code == 200
        assert f'data-remove="chip-{task_id}"' in answer.text

    for client in (alice_laptop, alice_phone):  # every one, not only the last 40
        assert chips_on_page(client, "shop") == set()
        assert chips_in_stream_bootstrap(client, "shop") == set()
        assert chips_on_page(client, "other") == set(other[2:])
        assert chips_in_stream_bootstrap(client, "other") == set(other[2:])
    # Another user of the workspace still has every failure waiting for them.
    assert chips_on_page(bob, "shop") == set(shop)
    assert chips_in_stream_bootstrap(bob, "other") == set(other)


def test_only_a_finished_task_of_the_workspace_is_dismissed(browser, insert_task, sql_conn):
    alice = browser("alice")
    running = str(insert_task("running", "shop", WORKSPACE)["id"])
    failed = str(insert_task("failed", "shop", WORKSPACE)["id"])
    elsewhere = str(insert_task("failed", "shop", "team-b")["id"])

    kept = dismiss(alice, running)
    assert kept.status_code == 200 and f'id="chip-{running}"' in kept.text  # shown as it is
    assert dismiss(alice, elsewhere).status_code == 404
    assert dismiss(alice, failed).status_code == 200
    assert dismiss(alice, failed).status_code == 200  # again: a no-op
    assert chips_on_page(alice, "shop") == {running}
    rows = sql_conn.execute("SELECT task_id::text AS id FROM dock_dismissals").fetchall()
    assert [r["id"] for r in rows] == [failed]

    # Retention's purge (a delete of the task) takes the dismissal with it.
    sql_conn.execute("DELETE FROM deploy_tasks WHERE id = %s", (failed,))
    assert sql_conn.execute("SELECT count(*) AS n FROM dock_dismissals").fetchone()["n"] == 0


def test_a_dismissal_needs_the_csrf_token(browser, insert_task):
    alice = browser("alice")
    failed = str(insert_task("failed", "shop", WORKSPACE)["id"])

    refused = alice.post(f"/tasks/{failed}/dismiss", headers={"X-CSRF-Token": "forged"})

    assert refused.status_code == 403
    assert chips_on_page(alice, "shop") == {failed}
