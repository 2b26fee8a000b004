-- Queries on projects (started from the landing page). Retention never deletes from this table:
-- a project row is no task data (see migrations/0007_projects.sql).

-- project_list --
-- The projects of a workspace, started or with tasks, with their task counts, most recently
-- active first: one read over both tables.
WITH counts AS (
    SELECT project_id, count(*) AS tasks,
           count(*) FILTER (WHERE status IN ('queued', 'running', 'blocked', 'applying')) AS active,
           max(created_at) AS last_created_at
    FROM deploy_tasks WHERE workspace = %(workspace)s
    GROUP BY project_id
), started AS (
    SELECT project_id, created_at FROM projects WHERE workspace = %(workspace)s
)
SELECT project_id, coalesce(c.tasks, 0) AS tasks, coalesce(c.active, 0) AS active,
       greatest(c.last_created_at, s.created_at) AS last_created_at
FROM counts c FULL JOIN started s USING (project_id)
ORDER BY last_created_at DESC, project_id LIMIT 200;

-- project_start --
-- Record a project the caller started (starting it again is a no-op).
INSERT INTO projects (workspace, project_id, created_by)
VALUES (%(workspace)s, %(project_id)s, %(user)s)
ON CONFLICT DO NOTHING;
