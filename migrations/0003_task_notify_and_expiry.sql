-- One home for two rules the named queries (engine/sql) share: the notification a task change
-- sends, and when a finished task is past retention.

-- The task-change NOTIFY: ids only, never content (engine/readside/fanout.py parses it); a
-- retention purge says `removed`, since nothing is left to re-read. Returns void like pg_notify,
-- one notification per call.
CREATE OR REPLACE FUNCTION notify_task_changed(namespace text, project_id text, task_id uuid,
                                               removed boolean DEFAULT false)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('deploy_tasks', CASE WHEN removed
        THEN json_build_object('namespace', namespace, 'project', project_id, 'task', task_id,
                               'removed', true)
        ELSE json_build_object('namespace', namespace, 'project', project_id, 'task', task_id)
    END::text)
$$;

-- Finished and past retention ("expired"). One expression, STABLE: the planner inlines it, so
-- `finished_at < cutoff` still bounds the index scans of the purge statements that call it.
CREATE OR REPLACE FUNCTION task_expired(status task_status, finished_at timestamptz,
                                        cutoff timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT status IN ('completed', 'failed', 'cancelled') AND finished_at < cutoff
$$;
