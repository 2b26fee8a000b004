-- One word per meaning: the tenant is the `workspace`; `namespace` now means only the Kubernetes
-- namespace (KubeTarget, manifests, templates' ${namespace}, target_namespace).
--
-- A column rename keeps the data, its place in the table and every index and key on it. The
-- NOTIFY payload key changes with it ({workspace, project, task}); old processes' queries name
-- the old columns, so old and new processes must not run across this migration (README,
-- "Upgrading across 0012").
ALTER TABLE deploy_tasks RENAME COLUMN namespace TO workspace;
ALTER TABLE task_runtimes RENAME COLUMN namespace TO workspace;
ALTER TABLE cleanup_jobs RENAME COLUMN namespace TO workspace;
ALTER TABLE idempotency_keys RENAME COLUMN namespace TO workspace;
ALTER TABLE projects RENAME COLUMN namespace TO workspace;
ALTER TABLE dock_dismissals RENAME COLUMN namespace TO workspace;

-- PostgreSQL 18 names each NOT NULL constraint after its column (<table>_namespace_not_null) and
-- a column rename keeps the old name: rename those too (older servers have none to rename).
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS tbl, conname FROM pg_constraint
             WHERE contype = 'n' AND connamespace = 'public'::regnamespace
               AND conname LIKE '%\_namespace\_not\_null'
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', c.tbl, c.conname,
                       replace(c.conname, '_namespace_not_null', '_workspace_not_null'));
    END LOOP;
END
$$;

-- IF EXISTS: a database adopted from the old schema file may have lost it (nothing else does).
ALTER INDEX IF EXISTS deploy_tasks_by_namespace RENAME TO deploy_tasks_by_workspace;

-- A cleanup job's snapshot is read by key (cleanup_job_claim_due reads snapshot ->> 'workspace'):
-- jobs written before this migration carry the tenant under 'namespace'.
UPDATE cleanup_jobs
SET snapshot = (snapshot - 'namespace') || jsonb_build_object('workspace', snapshot -> 'namespace')
WHERE snapshot ? 'namespace';
-- The runtime a runtime_stop captured, and the runtimes a retention purge captured.
UPDATE cleanup_jobs
SET snapshot = jsonb_set(snapshot, '{runtime}',
    ((snapshot -> 'runtime') - 'namespace')
    || jsonb_build_object('workspace', snapshot -> 'runtime' -> 'namespace'))
WHERE snapshot -> 'runtime' ? 'namespace';
UPDATE cleanup_jobs
SET snapshot = jsonb_set(snapshot, '{runtimes}', (
    SELECT jsonb_agg(CASE WHEN r ? 'namespace'
                          THEN (r - 'namespace') || jsonb_build_object('workspace', r -> 'namespace')
                          ELSE r END ORDER BY i)
    FROM jsonb_array_elements(snapshot -> 'runtimes') WITH ORDINALITY AS e (r, i)))
WHERE jsonb_typeof(snapshot -> 'runtimes') = 'array'
  AND EXISTS (SELECT FROM jsonb_array_elements(snapshot -> 'runtimes') r WHERE r ? 'namespace');

-- The parameter is named in the payload; the signature is unchanged (a rename of an input
-- parameter needs DROP + CREATE, and nothing depends on the function but the named queries).
DROP FUNCTION notify_task_changed(text, text, uuid, boolean, task_status, bigint, text, boolean,
                                  boolean);

CREATE FUNCTION notify_task_changed(workspace text, project_id text, task_id uuid,
                                    removed boolean DEFAULT false,
                                    status task_status DEFAULT NULL,
                                    epoch bigint DEFAULT NULL,
                                    owner text DEFAULT NULL,
                                    cancel boolean DEFAULT NULL,
                                    runner boolean DEFAULT false)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('deploy_tasks', (
        jsonb_build_object('workspace', workspace, 'project', project_id, 'task', task_id)
        || CASE WHEN removed THEN '{"removed": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN runner THEN '{"runner": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN status IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('lease', jsonb_build_object(
                    'status', status, 'epoch', epoch, 'owner', owner, 'cancel', cancel)) END
    )::text)
$$;
