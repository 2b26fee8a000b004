"""The query loader (engine/sql/__init__.py): a block derived from another by its select list."""

import pytest

from engine.sql import load

BASE = """-- thing_move --
-- Move things, returning the whole rows.
WITH moved AS (
    UPDATE things t SET n = n + 1 RETURNING t.*
)
SELECT m.*, true AS moved
FROM moved m;
"""
DERIVED = """-- thing_move_ids --
-- thing_move returning the ids only.
= thing_move SELECT m.id,
    m.n
"""


def test_a_derived_block_is_its_base_with_the_final_select_list_replaced(tmp_path):
    (tmp_path / "things.sql").write_text(BASE + "\n" + DERIVED)
    queries = load(tmp_path)
    assert queries["thing_move"].endswith("SELECT m.*, true AS moved\nFROM moved m;")
    assert queries["thing_move_ids"] == queries["thing_move"].replace(
        "-- thing_move\n", "-- thing_move_ids\n"
    ).replace("SELECT m.*, true", "SELECT m.id, m.n, true")
    assert "RETURNING t.*" in queries["thing_move_ids"]  # only the final select list changes


@pytest.mark.parametrize(
    ("blocks", "refusal"),
    [
        (DERIVED, "no written query"),
        (BASE.replace("SELECT m.*", "SELECT m.id") + DERIVED, "no `SELECT alias.*` line"),
        (
            BASE
            + DERIVED
            + DERIVED.replace("thing_move_ids --", "thing_move_n --").replace(
                "= thing_move ", "= thing_move_ids "
            ),
            "no written query",
        ),
    ],
)
def test_a_derived_block_without_a_base_to_narrow_is_refused(tmp_path, blocks, refusal):
    (tmp_path / "things.sql").write_text(blocks)
    with pytest.raises(RuntimeError, match=refusal):
        load(tmp_path)
