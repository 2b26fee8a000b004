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
            found[name] = text[match.end() : end].strip()  # type: ignore[assignment]
    return found


queries = _load()
