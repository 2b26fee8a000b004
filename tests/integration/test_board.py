"""The project board: a failed task keeps its place on the dock until dismissed or superseded,
however old; the read is bounded by paging, not by a time cap."""

import html
import re

import psycopg.sql

from engine.readside.store import BOARD_LIMIT, read_board

DAYS_AGO = psycopg.sql.SQL("now() - interval '3 days'")
FAILURE = {"failure_reason": "apply_failed", "failure_message": "the cluster refused it"}


def test_an_old_failure_stays_on_the_dock_until_superseded_or_dismissed(client, insert_task):
    old_failure = insert_task(status="failed", created_at=DAYS_AGO, finished_at=DAYS_AGO, **FAILURE)
    old_success = insert_task(status="completed", created_at=DAYS_AGO, finished_at=DAYS_AGO)
    superseded = insert_task(status="failed", created_at=DAYS_AGO, finished_at=DAYS_AGO, **FAILURE)
    insert_task(
        status="completed",
        created_at=DAYS_AGO,
        finished_at=DAYS_AGO,
        retried_from_task_id=superseded["id"],
    )
    page = client.get("/projects/demo").get_data(as_text=True)
    assert str(old_failure["id"]) in page  # positive control: the page lists chips by id
    assert str(old_success["id"]) not in page and str(superseded["id"]) not in page

    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    dismissed = client.post(
        f"/tasks/{old_failure['id']}/dismiss", headers={"X-CSRF-Token": "test-token"}
    )
    assert dismissed.status_code == 200
    assert str(old_failure["id"]) not in client.get("/projects/demo").get_data(as_text=True)


def test_the_board_read_is_paged_newest_first(runtime, insert_task):
    failures = [
        insert_task(
            status="failed",
            created_at=psycopg.sql.SQL(f"now() - interval '{days} days'"),
            finished_at=DAYS_AGO,
            **FAILURE,
        )
        for days in (5, 4, 3, 2, 1)
    ]
    newest_first = [str(t["id"]) for t in reversed(failures)]
    first = read_board(runtime.db, "default", "demo", limit=2)
    second = read_board(runtime.db, "default", "demo", before=first[-1], limit=2)
    third = read_board(runtime.db, "default", "demo", before=second[-1], limit=2)
    assert [p["id"] for p in first + second + third] == newest_first


SHOW_OLDER = re.compile(
    r'<button[^>]*data-action="show-older"[^>]*hx-get="([^"]+)"[^>]*>Show older<'
)


def chip_ids(html: str) -> list[str]:
    return re.findall(r'<article id="chip-([0-9a-f-]{36})"', html)


def test_show_older_loads_the_next_page_of_the_dock_through_its_cursor(client, insert_task):
    # One page and three more, one second apart: the three oldest are on the second page only.
    tasks = [
        insert_task(
            status="failed",
            created_at=psycopg.sql.SQL(f"now() - interval '{n} seconds'"),
            finished_at=DAYS_AGO,
            **FAILURE,
        )
        for n in range(BOARD_LIMIT + 3, 0, -1)
    ]
    newest_first = [str(t["id"]) for t in reversed(tasks)]

    page = client.get("/projects/demo").get_data(as_text=True)
    assert chip_ids(page) == newest_first[:BOARD_LIMIT]
    [url] = SHOW_OLDER.findall(page)
    assert url.startswith("/projects/demo/dock/older?before=")

    older = client.get(html.unescape(url), headers={"HX-Request": "true"})
    assert older.status_code == 200 and older.mimetype == "text/html"
    body = older.get_data(as_text=True)
    assert chip_ids(body) == newest_first[BOARD_LIMIT:]
    assert 'data-slot="dock-chips"' in body  # the fragments handler inserts them in order
    # The last page: the control is replaced by its end, nothing more to load.
    assert 'id="dock-older"' in body and "No older deployments." in body
    assert not SHOW_OLDER.findall(body)

    # A plain visit lands on the project page; a cursor that is not ours is a readable 400.
    assert client.get(html.unescape(url)).status_code == 302
    bad = client.get("/projects/demo/dock/older?before=nonsense", headers={"HX-Request": "true"})
    assert bad.status_code == 400 and "cursor is not valid" in bad.get_data(as_text=True)


def test_a_board_that_fits_one_page_offers_no_show_older(client, insert_task):
    only = insert_task(status="failed", finished_at=DAYS_AGO, **FAILURE)
    page = client.get("/projects/demo").get_data(as_text=True)
    assert chip_ids(page) == [str(only["id"])]  # positive control: the dock is rendered
    assert 'id="dock-older"' in page and "Show older" not in page
