"""Named queries, one .sql file per table, loaded once.

Each block starts with a `-- name --` line and a one-line `-- description`; callers say
`queries["task_claim"]`. No SQL lives outside these files (tests excepted), but for the column
list of the narrowed form below.
"""

import re
from pathlib import Path
from typing import LiteralString

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)


def _load() -> dict[str, LiteralString]:
    found: dict[str, LiteralString] = {}
    for path in sorted(Path(__file__).parent.glob("*.sql")):
        text = path.read_text()
        headers = list(_HEADER.finditer(text))
        for i, match in enumerate(headers):
            end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            name = match.group(1)
            if name in found:
                raise RuntimeError(f"query {name} defined twice")
            found[name] = _sent(name, text[match.end() : end])  # type: ignore[assignment]
    return found


def _sent(name: str, block: str) -> str:
    """The text sent for a block: its name as a comment (so pg_stat_activity and pg_stat_statements
    say which query it is), then its SQL without the comment lines. Shorter text is cheaper on
    every call: psycopg caches a query's conversion only up to 4096 bytes (task_transition with
    its comments is longer), and re-parses a longer one each time it runs."""
    sql = [line for line in block.strip().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join([f"-- {name}", *sql])


def _narrowed(loaded: dict[str, str]) -> dict[str, str]:
    """The narrowed forms: a query again under a new name, returning fewer columns.

    task_transition_moved is the one status write returning only what a mover reads back: the
    moved row's identity and project, statuses, lease, pending cancel and times (metrics). A
    runner's own move, a shutdown and the reaper hand no row on; loading the whole task row (26
    columns, jsonb among them) was an eighth to a fifth of a transition's client CPU
    (BENCHMARKS.md, "Requests first").
    """
    whole = "SELECT m.*, CASE WHEN %(notify)s::bool"
    moved = (
        "SELECT m.id, m.namespace, m.project_id, m.status, m.previous_status, m.lease_epoch,"
        " m.lease_owner, m.cancel_requested_at, m.created_at, m.finished_at,"
        " CASE WHEN %(notify)s::bool"
    )
    transition = loaded["task_transition"]
    if transition.count(whole) != 1:
        raise RuntimeError("task_transition no longer ends with the SELECT its narrowed form edits")
    return {
        "task_transition_moved": transition.replace(whole, moved).replace(
            "-- task_transition\n", "-- task_transition_moved\n", 1
        )
    }


queries = _load()
queries.update(_narrowed(queries))
