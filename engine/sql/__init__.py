"""Named queries, one .sql file per table, loaded once.

Each block starts with a `-- name --` line and a one-line `-- description`; callers say
`queries["task_claim"]`. No SQL lives outside these files (tests excepted).
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
    say which query it is), then its SQL without the comment lines and the indentation (no
    literal spans lines). Shorter text is cheaper on every call: psycopg caches a query's
    conversion only up to 4096 bytes (task_transition as written is longer), and re-parses a
    longer one each time it runs (tests/unit/test_invariants.py holds every query under it)."""
    sql = [line.strip() for line in block.strip().splitlines()]
    return "\n".join([f"-- {name}", *(line for line in sql if not line.startswith("--"))])


queries = _load()
