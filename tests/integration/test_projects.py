"""Projects started from the landing page: recorded per workspace by an explicit POST (never by a
GET), listed with the projects that have tasks in one read, ids checked by the API's rule."""

import pytest

from tests.helpers import IMAGE_SOURCE


def page_post(client, path, form, token="test-token"):
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    return client.post(path, data={**form, "csrf_token": token})


def started(sql_conn) -> list[tuple]:
    return [
        (r["workspace"], r["project_id"], r["created_by"])
        for r in sql_conn.execute("SELECT * FROM projects ORDER BY project_id")
    ]


def test_starting_a_project_records_it_and_the_landing_page_lists_it(client, sql_conn):
    assert 'href="/projects/fresh"' not in client.get("/").get_data(as_text=True)
    response = page_post(client, "/projects", {"id": "fresh"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/projects/fresh"
    assert started(sql_conn) == [("default", "fresh", "dev")]
    landing = client.get("/").get_data(as_text=True)
    assert 'href="/projects/fresh"' in landing and "no deployments yet" in landing
    assert page_post(client, "/projects", {"id": "fresh"}).status_code == 303  # again: a no-op
    assert started(sql_conn) == [("default", "fresh", "dev")]


def test_started_and_deployed_projects_are_listed_together(client, sql_conn, create_task):
    create_task(source=dict(IMAGE_SOURCE), project_id="busy")
    page_post(client, "/projects", {"id": "fresh"})
    page_post(client, "/projects", {"id": "busy"})  # started and deployed: listed once
    landing = client.get("/").get_data(as_text=True)
    assert landing.count('href="/projects/busy"') == 1
    assert "1 deployment" in landing
    assert landing.count('href="/projects/fresh"') == 1


def test_opening_a_project_page_records_nothing(client, sql_conn):
    assert client.get("/projects/looked-at").status_code == 200
    assert started(sql_conn) == []
    assert 'href="/projects/looked-at"' not in client.get("/").get_data(as_text=True)


def test_another_workspaces_project_is_not_listed(client, sql_conn):
    page_post(client, "/projects", {"id": "ours"})
    sql_conn.execute(
        "INSERT INTO projects (workspace, project_id, created_by)"
        " VALUES ('other-team', 'theirs', 'someone')"
    )
    landing = client.get("/").get_data(as_text=True)
    assert 'href="/projects/ours"' in landing  # the positive control
    assert "theirs" not in landing


@pytest.mark.parametrize("project_id", ["-bad", "Demo", "a" * 64, "", "x_y", " demo"])
def test_a_bad_id_is_refused_with_the_apis_rule_and_a_readable_message(
    client, sql_conn, project_id
):
    api = client.post("/api/v1/tasks", json={"projectId": project_id, "source": IMAGE_SOURCE})
    assert api.status_code == 400  # the API refuses it too: one rule
    response = page_post(client, "/projects", {"id": project_id})
    assert response.status_code == 400
    assert "A project id is lowercase letters, digits and" in response.get_data(as_text=True)
    assert started(sql_conn) == []


def test_starting_a_project_needs_the_csrf_token(client, sql_conn):
    assert page_post(client, "/projects", {"id": "fresh"}, token="wrong").status_code == 403
    assert started(sql_conn) == []
    assert page_post(client, "/projects", {"id": "fresh"}).status_code == 303  # the control
