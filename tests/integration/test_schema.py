"""schema.sql is applied at every boot: it must be idempotent and bring older databases forward."""
from engine.db import apply_schema


def test_applying_the_schema_again_changes_nothing_and_adds_missing_columns(database_url, sql_conn):
    sql_conn.execute("ALTER TABLE deploy_tasks DROP COLUMN previous_status")
    apply_schema(database_url)
    apply_schema(database_url)
    columns = {r["column_name"] for r in sql_conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'deploy_tasks'")}
    assert "previous_status" in columns
