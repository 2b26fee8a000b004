-- A runner's own writes (its steps and its own status moves) no longer notify one by one: each
-- process announces the tasks its runners wrote to once per short tick, in one statement
-- (engine/notices.py), marked "runner". A NOTIFY makes its commit take a server-wide lock held
-- until after the commit, so notifying commits happen one at a time; a runner's write needs no
-- notification of its own (the process running the task already knows what it wrote, and the
-- write answered it whether a cancel is pending). A "runner" payload tells viewers to re-read and
-- tells the process running the task nothing it must act on. Still no content: ids only.
DROP FUNCTION IF EXISTS notify_task_changed(text, text, uuid, boolean, task_status, bigint, text,
                                            boolean);

CREATE OR REPLACE FUNCTION notify_task_changed(namespace text, project_id text, task_id uuid,
                                               removed boolean DEFAULT false,
                                               status task_status DEFAULT NULL,
                                               epoch bigint DEFAULT NULL,
                                               owner text DEFAULT NULL,
                                               cancel boolean DEFAULT NULL,
                                               runner boolean DEFAULT false)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('deploy_tasks', (
        jsonb_build_object('namespace', namespace, 'project', project_id, 'task', task_id)
        || CASE WHEN removed THEN '{"removed": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN runner THEN '{"runner": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN status IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('lease', jsonb_build_object(
                    'status', status, 'epoch', epoch, 'owner', owner, 'cancel', cancel)) END
    )::text)
$$;
