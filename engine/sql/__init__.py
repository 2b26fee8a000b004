"""Named queries, one .sql file per table, loaded once.

Each block starts with a `-- name --` line and a one-line `-- description`; callers say
`queries["task_claim"]`. No SQL lives outside these files (tests excepted).

A block may be another's statement returning other columns, written once: its body is
`= base SELECT columns`, and its text is the base's with the base's final `SELECT alias.*` (the
last line that starts so) replaced by `SELECT columns`. Each stays a statement of its own
(prepared, counted and named apart); a base without such a line, or that is itself derived, is
refused at load.
"""

import re
from pathlib import Path
from typing import LiteralString

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)
#: A derived block's body: its base's name, then its own select list.
_DERIVED = re.compile(r"= ([a-z0-9_]+) (SELECT .+)", re.DOTALL)
#: The line of a base statement whose whole-row select list a derived block replaces.
_WHOLE_ROW = re.compile(r"^SELECT \w+\.\*", re.MULTILINE)


def load(directory: Path) -> dict[str, LiteralString]:
    """Every named query of the .sql files in `directory`, by name."""
    found: dict[str, LiteralString] = {}
    derived: dict[str, tuple[str, str]] = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text()
        headers = list(_HEADER.finditer(text))
        for i, match in enumerate(headers):
            end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            name = match.group(1)
            if name in found or name in derived:
                raise RuntimeError(f"query {name} defined twice")
            sql = _sql(text[match.end() : end])
            rule = _DERIVED.fullmatch(sql)
            if rule:
                derived[name] = (rule.group(1), " ".join(rule.group(2).split()))
            else:
                found[name] = _sent(name, sql)  # type: ignore[assignment]
    for name, (base, select) in derived.items():
        found[name] = _sent(name, _narrowed(found, derived, base, select, name))  # type: ignore[assignment]
    return found


def _sql(block: str) -> str:
    """A block's SQL without the comment lines and the indentation (no literal spans lines)."""
    lines = [line.strip() for line in block.strip().splitlines()]
    return "\n".join(line for line in lines if not line.startswith("--"))


def _sent(name: str, sql: str) -> str:
    """The text sent for a block: its name as a comment (so pg_stat_activity and pg_stat_statements
    say which query it is), then its SQL. Shorter text is cheaper on every call: psycopg caches a
    query's conversion only up to 4096 bytes (task_transition as written is longer), and re-parses
    a longer one each time it runs (tests/unit/test_invariants.py holds every query under it)."""
    return f"-- {name}\n{sql}"


def _narrowed(found: dict[str, str], derived: dict, base: str, select: str, name: str) -> str:
    """The SQL of `base` with its final whole-row select list replaced by `select`."""
    if base not in found or base in derived:
        raise RuntimeError(f"query {name} derives from {base}, which is no written query")
    sql = found[base].split("\n", 1)[1]
    rows = list(_WHOLE_ROW.finditer(sql))
    if not rows:
        raise RuntimeError(f"query {name}: {base} has no `SELECT alias.*` line to narrow")
    last = rows[-1]
    return sql[: last.start()] + select + sql[last.end() :]


queries = load(Path(__file__).parent)
