"""Page actions (blueprints/pages/project_page.py) on a task whose state refuses them: a
TaskConflict shows the task as it is (fragments, 200), any other domain error is the error page
with its status."""

import re
import uuid

import pytest


@pytest.fixture
def page_post(client):
    """POST a page form with a valid CSRF token, as the page's own htmx request would."""
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    return lambda path: client.post(path, data={"csrf_token": "test-token"})


@pytest.mark.parametrize("action", ["cancel", "redeploy", "input"])
def test_a_refused_page_action_shows_the_task_as_it_is(page_post, insert_task, action):
    # cancel: TaskAlreadyFinished; redeploy: PredecessorNotRedeployable; input: TaskNotBlocked
    done = insert_task(status="completed")
    response = page_post(f"/tasks/{done['id']}/{action}")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert str(done["id"]) in response.get_data(as_text=True)


@pytest.mark.parametrize("action", ["cancel", "redeploy", "input"])
def test_a_page_action_on_a_missing_task_is_not_found(page_post, action):
    response = page_post(f"/tasks/{uuid.uuid4()}/{action}")
    assert response.status_code == 404
    # task_not_found, or predecessor_not_found for a redeploy
    assert re.search(r'data-error-code="\w*not_found"', response.get_data(as_text=True))
