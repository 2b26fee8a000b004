-- Queries on task_runtimes: the durable handles of what a task started (seed 001). A row stays
-- until a stop of its runtime is confirmed; liveness is judged in Python
-- (engine/cleanup/task_runtimes.py, engine/cleanup/process_groups.py).

-- runtime_delete_devbox --
-- Forget the runtime row of a devbox whose deletion is confirmed.
DELETE FROM task_runtimes WHERE kind = 'devbox' AND remote_id = %(devbox_id)s
RETURNING id;

-- runtime_get --
-- One runtime row.
SELECT * FROM task_runtimes WHERE id = %(runtime_id)s;

-- runtime_insert_local_if_held --
-- Record a local process group a task started, for the holder of the task's lease (FOR SHARE:
-- a transition committing meanwhile is waited for and re-checked, as in task_write_if_held).
INSERT INTO task_runtimes (task_id, workspace, kind, liveness, label, host, owner, owner_pid,
                           owner_start_ticks, boot_id, pid, pgid, start_ticks, resume)
SELECT t.id, t.workspace, 'local', %(liveness)s, %(label)s, %(host)s, %(owner)s, %(owner_pid)s,
       %(owner_start_ticks)s, %(boot_id)s, %(pid)s, %(pgid)s, %(start_ticks)s, %(resume)s
FROM deploy_tasks t
WHERE t.id = %(task_id)s AND t.lease_epoch = %(epoch)s AND t.lease_owner = %(owner)s
  AND t.status IN ('running', 'applying')
FOR SHARE OF t
RETURNING *;

-- runtime_list_local_of_owner --
-- Local runtimes an engine runtime started and has not released (optionally of one task).
SELECT * FROM task_runtimes
WHERE host = %(host)s AND owner = %(owner)s AND kind = 'local' AND status <> 'stopped'
  AND (%(task_id)s::uuid IS NULL OR task_id = %(task_id)s::uuid)
ORDER BY created_at;

-- runtime_list_orphaned_elsewhere --
-- Local runtimes of ANOTHER host still marked running although their task ended (or is gone)
-- more than the lease TTL ago. A live engine releases its run's processes as the run ends (or
-- marks them stop_failed), so their engine is gone, and perhaps their host with it (a replaced
-- pod): nobody on that host may ever judge them. No process here can see them either.
SELECT r.* FROM task_runtimes r
LEFT JOIN deploy_tasks t ON t.id = r.task_id
WHERE r.kind = 'local' AND r.status = 'running' AND r.host <> %(host)s
  AND r.updated_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(lease_ttl_s)s::float8)
  AND (t.id IS NULL
       OR (t.status IN ('completed', 'failed', 'cancelled')
           AND t.finished_at < coalesce(%(now)s::timestamptz, now())
                               - make_interval(secs => %(lease_ttl_s)s::float8)))
ORDER BY r.created_at LIMIT %(limit)s;

-- runtime_list_reconcilable_on_host --
-- Rows left on this host by other engine runtimes (previous boots, sibling workers), with their
-- task's state ('missing' once purged). A devbox of a finished task whose pause is confirmed is
-- the cleanup jobs' business, not reported again at every boot.
SELECT r.*, coalesce(t.status::text, 'missing') AS task_state
FROM task_runtimes r
LEFT JOIN deploy_tasks t ON t.id = r.task_id
WHERE r.host = %(host)s AND r.owner <> %(owner)s AND r.status <> 'stopped'
  AND NOT (r.kind = 'devbox' AND t.status IN ('completed', 'failed', 'cancelled')
           AND t.devbox_id = r.remote_id AND t.devbox_paused_at IS NOT NULL)
ORDER BY r.created_at LIMIT %(limit)s;

-- runtime_mark_stop_failed --
-- A stop could not be confirmed: keep the row as the durable handle, with the error.
UPDATE task_runtimes SET status = 'stop_failed', last_error = %(error)s, updated_at = now()
WHERE id = %(runtime_id)s AND status <> 'stopped'
RETURNING id;

-- runtime_release_if_process --
-- The stop of a local runtime is confirmed: delete the row, or keep it stripped of its process
-- handle where it still carries something to resume. Says which.
WITH removed AS (
    DELETE FROM task_runtimes
    WHERE id = %(runtime_id)s AND kind = 'local' AND resume IS NULL
      AND pid IS NOT DISTINCT FROM %(pid)s AND start_ticks IS NOT DISTINCT FROM %(start_ticks)s
    RETURNING id, 'removed' AS disposition
), repaired AS (
    UPDATE task_runtimes
    SET status = 'stopped', liveness = 'none', pid = NULL, pgid = NULL, start_ticks = NULL,
        last_error = NULL, updated_at = now()
    WHERE id = %(runtime_id)s AND kind = 'local' AND resume IS NOT NULL
      AND pid IS NOT DISTINCT FROM %(pid)s AND start_ticks IS NOT DISTINCT FROM %(start_ticks)s
    RETURNING id, 'repaired' AS disposition
)
SELECT * FROM removed UNION ALL SELECT * FROM repaired;
