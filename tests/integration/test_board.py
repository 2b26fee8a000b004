"""The project board: a failed task keeps its place on the dock until dismissed or superseded,
however old; the read is bounded by paging, not by a time cap."""
import psycopg.sql

from blueprints.views import DISMISS_COOKIE
from engine.readside.store import read_board

DAYS_AGO = psycopg.sql.SQL("now() - interval '3 days'")
FAILURE = {"failure_reason": "apply_failed", "failure_message": "the cluster refused it"}


def test_an_old_failure_stays_on_the_dock_until_superseded_or_dismissed(client, insert_task):
    old_failure = insert_task(status="failed", created_at=DAYS_AGO, finished_at=DAYS_AGO, **FAILURE)
    old_success = insert_task(status="completed", created_at=DAYS_AGO, finished_at=DAYS_AGO)
    superseded = insert_task(status="failed", created_at=DAYS_AGO, finished_at=DAYS_AGO, **FAILURE)
    insert_task(status="completed", created_at=DAYS_AGO, finished_at=DAYS_AGO,
                retried_from_task_id=superseded["id"])
    page = client.get("/projects/demo").get_data(as_text=True)
    assert str(old_failure["id"]) in page  # positive control: the page lists chips by id
    assert str(old_success["id"]) not in page and str(superseded["id"]) not in page

    client.set_cookie(DISMISS_COOKIE, str(old_failure["id"]))
    assert str(old_failure["id"]) not in client.get("/projects/demo").get_data(as_text=True)


def test_the_board_read_is_paged_newest_first(runtime, insert_task):
    failures = [insert_task(status="failed", created_at=psycopg.sql.SQL(
        f"now() - interval '{days} days'"), finished_at=DAYS_AGO, **FAILURE) for days in (5, 4, 3, 2, 1)]
    newest_first = [str(t["id"]) for t in reversed(failures)]
    first = read_board(runtime.db, "default", "demo", limit=2)
    second = read_board(runtime.db, "default", "demo", before=first[-1], limit=2)
    third = read_board(runtime.db, "default", "demo", before=second[-1], limit=2)
    assert [p["id"] for p in first + second + third] == newest_first
