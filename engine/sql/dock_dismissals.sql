-- Queries on dock_dismissals: the finished tasks each user dismissed from a project's dock (see
-- migrations/0010_dismissals.sql). Rows leave with their task (ON DELETE CASCADE).

-- dock_dismissal_insert_if_finished --
-- Dismiss a finished task of the workspace for one user; no row back: no such finished task, or
-- dismissed already.
INSERT INTO dock_dismissals (workspace, user_id, project_id, task_id)
SELECT t.workspace, %(user)s, t.project_id, t.id
FROM deploy_tasks t
WHERE t.id = %(task_id)s AND t.workspace = %(workspace)s
  AND t.status IN ('completed', 'failed', 'cancelled')
ON CONFLICT DO NOTHING
RETURNING task_id;

-- dock_dismissal_task_ids --
-- The tasks one user dismissed in a project's dock (by the primary key's prefix).
SELECT task_id FROM dock_dismissals
WHERE workspace = %(workspace)s AND user_id = %(user)s AND project_id = %(project_id)s;
