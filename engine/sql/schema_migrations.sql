-- Queries on schema_migrations: which numbered migrations (migrations/NNNN_name.sql) a database
-- has. Only engine/operations/migrations.py runs these; the boot of a current database runs nothing but
-- schema_migrations_state and schema_migrations_list (plain reads: ACCESS SHARE at most).

-- schema_migrations_create --
-- The ledger itself, created by the first migrating boot (before any migration runs).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    -- true: recorded for a database whose schema predates the ledger, not run.
    adopted    boolean NOT NULL DEFAULT false,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- schema_migrations_list --
-- Every recorded migration, oldest first.
SELECT version, name, adopted, applied_at FROM schema_migrations ORDER BY version

-- schema_migrations_lock --
-- Serialize migrating boots (session lock: held across the per-migration transactions).
SELECT pg_advisory_lock(%(key)s)

-- schema_migrations_record --
-- Record one migration as applied (or adopted), in the transaction that applied it.
INSERT INTO schema_migrations (version, name, adopted) VALUES (%(version)s, %(name)s, %(adopted)s)

-- schema_migrations_state --
-- Whether the ledger exists, and whether the schema predates it (a database to adopt). Catalog
-- name lookups only: no lock on any table.
SELECT to_regclass('public.schema_migrations') IS NOT NULL AS has_ledger,
       to_regclass('public.deploy_tasks') IS NOT NULL AS has_schema

-- schema_migrations_unlock --
-- Release the migrating boots' lock.
SELECT pg_advisory_unlock(%(key)s)
