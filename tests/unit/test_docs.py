"""The README and docs/ link to each other: every relative link reaches a file, and every
`#anchor` a heading of it (as GitHub names them), so a moved section cannot leave a dead link."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (heading := re.match(r"#{1,6} (.+)", line)):
            text = heading.group(1).strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def dead_links(page: Path) -> list[str]:
    dead = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            dead.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            dead.append(target)
    return dead


def test_every_link_between_the_pages_resolves():
    assert len(PAGES) >= 7  # the README and the docs/ pages it links to
    assert {page.name: dead_links(page) for page in PAGES} == {page.name: [] for page in PAGES}


def test_a_dead_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Real cluster\n")
    page.write_text(
        "[ok](other.md#real-cluster) [gone](missing.md) [no such section](other.md#sandbox)\n"
    )
    assert dead_links(page) == ["missing.md", "other.md#sandbox"]
