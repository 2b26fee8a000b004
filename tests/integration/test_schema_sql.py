"""schema.sql is the schema migrations/ build: both loaded into empty databases, catalogs compared.

The comparison reads the catalogs (not pg_dump, whose client must match the server's major
version): enum labels in order, relations with their storage options, columns with type,
nullability and default, column order, constraints, indexes, functions, triggers, sequences,
policies, extensions and comments. On a mismatch it names every object that differs and shows
both definitions, so whoever adds a migration sees what to change in schema.sql.
"""

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from engine.operations import migrations
from tests.helpers import ROOT, _with_db

SCHEMA_SQL = ROOT / "schema.sql"

#: One catalog query per kind of object: rows of (key, definition), over the public schema.
CATALOG = {
    "type": """
        SELECT t.typname AS key,
               CASE t.typtype
                   WHEN 'e' THEN 'ENUM (' || (
                       SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                       FROM pg_enum e WHERE e.enumtypid = t.oid) || ')'
                   WHEN 'd' THEN 'DOMAIN ' || format_type(t.typbasetype, t.typtypmod)
                   ELSE 'typtype ' || t.typtype::text
               END || coalesce(' COMMENT ' || obj_description(t.oid, 'pg_type'), '') AS def
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'r', 'm')
    """,
    "relation": """
        SELECT c.relname AS key,
               'relkind ' || c.relkind::text || ', persistence ' || c.relpersistence::text
               || ', options ' || coalesce(array_to_string(c.reloptions, ', '), '(none)')
               || CASE WHEN c.relrowsecurity THEN ', row security' ELSE '' END
               || CASE WHEN c.relkind IN ('v', 'm') THEN ', AS ' || pg_get_viewdef(c.oid) ELSE ''
                  END
               || coalesce(' COMMENT ' || obj_description(c.oid, 'pg_class'), '') AS def
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
    """,
    "column": """
        SELECT c.relname || '.' || a.attname AS key,
               format_type(a.atttypid, a.atttypmod)
               || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
               || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
               || CASE a.attidentity WHEN '' THEN '' ELSE ' IDENTITY ' || a.attidentity::text END
               || CASE a.attgenerated WHEN '' THEN '' ELSE ' GENERATED ' || a.attgenerated::text END
               || CASE WHEN a.attcollation <> t.typcollation
                       THEN ' COLLATE ' || (SELECT collname FROM pg_collation
                                            WHERE oid = a.attcollation) ELSE '' END
               || coalesce(' COMMENT ' || col_description(c.oid, a.attnum), '') AS def
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
    """,
    # Dropped columns leave gaps in attnum: the order is what a reader sees, not the numbers.
    "column order": """
        SELECT c.relname AS key, string_agg(a.attname, ', ' ORDER BY a.attnum) AS def
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
        GROUP BY c.relname
    """,
    "constraint": """
        SELECT c.relname || '.' || k.conname AS key,
               pg_get_constraintdef(k.oid)
               || CASE WHEN k.condeferrable THEN ' DEFERRABLE' ELSE '' END AS def
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public'
    """,
    "index": """
        SELECT c.relname AS key,
               pg_get_indexdef(c.oid)
               || coalesce(' WITH ' || array_to_string(c.reloptions, ', '), '') AS def
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('i', 'I')
    """,
    "function": """
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS key,
               pg_get_functiondef(p.oid)
               || coalesce(' COMMENT ' || obj_description(p.oid, 'pg_proc'), '') AS def
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p', 'w')
    """,
    "trigger": """
        SELECT c.relname || '.' || g.tgname AS key, pg_get_triggerdef(g.oid) AS def
        FROM pg_trigger g
        JOIN pg_class c ON c.oid = g.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND NOT g.tgisinternal
    """,
    "sequence": """
        SELECT s.sequencename AS key,
               format('%s START %s INCREMENT %s MINVALUE %s MAXVALUE %s CACHE %s%s', s.data_type,
                      s.start_value, s.increment_by, s.min_value, s.max_value, s.cache_size,
                      CASE WHEN s.cycle THEN ' CYCLE' ELSE '' END)
               || coalesce(' OWNED BY ' || (
                   SELECT t.relname || '.' || a.attname
                   FROM pg_depend d
                   JOIN pg_class t ON t.oid = d.refobjid
                   JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                   WHERE d.classid = 'pg_class'::regclass AND d.objid = q.oid
                     AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')), '')
               AS def
        FROM pg_sequences s
        JOIN pg_namespace n ON n.nspname = s.schemaname
        JOIN pg_class q ON q.relname = s.sequencename AND q.relnamespace = n.oid
        WHERE s.schemaname = 'public'
    """,
    "policy": """
        SELECT tablename || '.' || policyname AS key,
               format('%s %s TO %s USING %s WITH CHECK %s', permissive, cmd, roles, qual,
                      with_check) AS def
        FROM pg_policies WHERE schemaname = 'public'
    """,
    "extension": "SELECT extname AS key, '' AS def FROM pg_extension WHERE extname <> 'plpgsql'",
}


def catalog(conn: psycopg.Connection) -> dict[tuple[str, str], str]:
    """Every schema object of the database: (kind, name) -> its definition."""
    found = {}
    for kind, query in CATALOG.items():
        for row in conn.execute(query):
            definition = row["def"]
            if kind == "function":
                # A function's body is kept as written: layout is not a difference.
                definition = re.sub(r"\s+", " ", definition).strip()
            found[(kind, row["key"])] = definition
    return found


def differences(from_schema: dict, from_migrations: dict) -> list[str]:
    """What differs, one paragraph per object, naming it and showing both definitions."""
    out = []
    for kind, name in sorted(from_schema.keys() | from_migrations.keys()):
        ours, theirs = from_schema.get((kind, name)), from_migrations.get((kind, name))
        if ours == theirs:
            continue
        if theirs is None:
            out.append(f"{kind} {name}: only in schema.sql (no migration creates it)\n    {ours}")
        elif ours is None:
            out.append(f"{kind} {name}: missing from schema.sql; migrations/ give\n    {theirs}")
        else:
            out.append(f"{kind} {name}:\n    schema.sql:  {ours}\n    migrations/: {theirs}")
    return out


def report(diffs: list[str]) -> str:
    return (
        f"schema.sql and migrations/ build different schemas ({len(diffs)} differences); "
        "change schema.sql to what migrations/ give:\n" + "\n".join(diffs)
    )


@contextmanager
def empty_database(admin_url: str) -> Iterator[str]:
    """A database with nothing in it (not cloned from the migrated template), dropped after."""
    name = f"t_schema_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_db(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module")
def built(pg_admin_url):
    """Connections to two empty databases: one loaded from schema.sql, one migrated."""
    with empty_database(pg_admin_url) as schema_url, empty_database(pg_admin_url) as migrated_url:
        with psycopg.connect(schema_url, autocommit=True, row_factory=dict_row) as conn:
            conn.execute(SCHEMA_SQL.read_text())
        migrations.upgrade(migrated_url)
        with (
            psycopg.connect(schema_url, row_factory=dict_row) as from_schema,
            psycopg.connect(migrated_url, row_factory=dict_row) as from_migrations,
        ):
            yield from_schema, from_migrations


def test_schema_sql_is_what_the_migrations_build(built):
    from_schema, from_migrations = built
    ours, theirs = catalog(from_schema), catalog(from_migrations)
    assert ("column", "deploy_tasks.lease_epoch") in theirs  # the control: the catalog is read
    diffs = differences(ours, theirs)
    if diffs:
        pytest.fail(report(diffs), pytrace=False)


#: One change each to a database loaded from schema.sql, and the object the report must name.
CHANGES = {
    "a column's type": (
        "ALTER TABLE deploy_tasks ALTER COLUMN phase TYPE varchar(40)",
        "column deploy_tasks.phase:",
    ),
    "a renamed column": (
        "ALTER TABLE projects RENAME COLUMN created_by TO creator",
        "column projects.created_by: missing from schema.sql",
    ),
    "a column's default": (
        "ALTER TABLE cleanup_jobs ALTER COLUMN attempts SET DEFAULT 1",
        "column cleanup_jobs.attempts:",
    ),
    "a partial index's predicate": (
        "DROP INDEX deploy_tasks_queued_by_age;"
        " CREATE INDEX deploy_tasks_queued_by_age ON deploy_tasks (created_at)"
        " WHERE status = 'blocked'",
        "index deploy_tasks_queued_by_age:",
    ),
    "an enum label": (
        "ALTER TYPE task_status ADD VALUE 'paused'",
        "type task_status:",
    ),
    "a check constraint": (
        "ALTER TABLE task_runtimes DROP CONSTRAINT task_runtimes_liveness_check",
        "constraint task_runtimes.task_runtimes_liveness_check: missing from schema.sql",
    ),
    "a function body": (
        "CREATE OR REPLACE FUNCTION task_expired(status task_status, finished_at timestamptz,"
        " cutoff timestamptz) RETURNS boolean LANGUAGE sql STABLE AS"
        " $$ SELECT status IN ('completed', 'failed') AND finished_at < cutoff $$",
        "function task_expired(status task_status, finished_at timestamp with time zone,",
    ),
    "a storage option": (
        "ALTER TABLE deploy_tasks SET (fillfactor = 90)",
        "relation deploy_tasks:",
    ),
    "a trigger": (
        "CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RETURN NEW; END $$;"
        " CREATE TRIGGER touch BEFORE UPDATE ON projects FOR EACH ROW EXECUTE FUNCTION touch()",
        "trigger projects.touch: only in schema.sql",
    ),
    "a sequence": (
        "ALTER SEQUENCE deploy_task_event_seq INCREMENT BY 2",
        "sequence deploy_task_event_seq:",
    ),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_the_comparison_names_what_differs(built, change):
    """The controls: one change to the schema.sql database, and the report names that object."""
    from_schema, from_migrations = built
    statement, named = CHANGES[change]
    with from_schema.transaction(force_rollback=True):
        from_schema.execute(statement)
        diffs = differences(catalog(from_schema), catalog(from_migrations))
    assert diffs, f"{change} went unnoticed"
    message = report(diffs)
    assert named in message, message
