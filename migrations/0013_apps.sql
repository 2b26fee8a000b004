-- Apps: the deployments that converge on the same resources form an app, keyed by the identity
-- redeploy already reuses (a template's instance name, an image's or a database's object name).
-- A generated column is the one place that key is derived: it appears when a task is inserted
-- (a source name, or a template identity copied from a predecessor) and when a template run first
-- records its allocated instance name, with no code path of its own to keep in step. Adding it
-- rewrites deploy_tasks once (pre-launch tables are small).
ALTER TABLE deploy_tasks ADD COLUMN rolled_back_from_task_id uuid;
ALTER TABLE deploy_tasks ADD COLUMN app_key text GENERATED ALWAYS AS (
    CASE source_kind
        WHEN 'template' THEN 'template:' || (artifact_summary -> 'resultIdentities' ->> 'templateInstanceName')
        WHEN 'image' THEN 'image:' || (source ->> 'name')
        WHEN 'database' THEN 'database:' || (source ->> 'name')
    END) STORED;

-- An app's history newest first (task_list_app_page) and each app's newest task
-- (task_list_apps_of_project), both in the (created_at, id) cursor order.
CREATE INDEX deploy_tasks_by_app
    ON deploy_tasks (workspace, project_id, app_key, created_at DESC, id DESC)
    WHERE app_key IS NOT NULL;
-- At most one active rollback per app: the loser of a rollback race loses the insert itself
-- (task_insert inserts nothing; engine/lifecycle/rollback.py answers AppDeployAlreadyActive).
CREATE UNIQUE INDEX deploy_tasks_one_active_rollback
    ON deploy_tasks (workspace, project_id, app_key)
    WHERE rolled_back_from_task_id IS NOT NULL
      AND status IN ('queued', 'running', 'blocked', 'applying');
