-- The task-change NOTIFY may carry the lease facts the writing statement already holds (status,
-- epoch, owner, whether a cancel is pending): the process running the task then decides from the
-- payload whether its runner must stop, instead of re-reading the row after every write (its own
-- writes included). Still no content: ids, a status and the lease owner id only. A payload
-- without `lease` (a canvas move, a purge) makes that process re-read, as before.
DROP FUNCTION IF EXISTS notify_task_changed(text, text, uuid, boolean);

CREATE OR REPLACE FUNCTION notify_task_changed(namespace text, project_id text, task_id uuid,
                                               removed boolean DEFAULT false,
                                               status task_status DEFAULT NULL,
                                               epoch bigint DEFAULT NULL,
                                               owner text DEFAULT NULL,
                                               cancel boolean DEFAULT NULL)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('deploy_tasks', (
        jsonb_build_object('namespace', namespace, 'project', project_id, 'task', task_id)
        || CASE WHEN removed THEN '{"removed": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN status IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('lease', jsonb_build_object(
                    'status', status, 'epoch', epoch, 'owner', owner, 'cancel', cancel)) END
    )::text)
$$;
