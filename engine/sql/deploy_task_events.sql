-- Queries on deploy_task_events (append-only; seq from one global sequence).

-- event_append_if_held --
-- Append an event for the holder of the task's lease, and notify.
-- FOR SHARE: the check and the insert must see the same task. Without the row lock a transition
-- committing meanwhile goes unseen (READ COMMITTED reads the statement's snapshot) and the event
-- lands after the terminal one; with it, this waits for that transition and re-checks the row.
WITH holder AS (
    SELECT id, namespace, project_id FROM deploy_tasks
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
      AND status IN ('running', 'applying')
    FOR SHARE
), appended AS (
    INSERT INTO deploy_task_events (task_id, kind, payload)
    SELECT id, %(kind)s, %(payload)s FROM holder
    RETURNING seq, task_id
)
SELECT a.seq, notify_task_changed(h.namespace, h.project_id, h.id) AS notified
FROM appended a JOIN holder h ON h.id = a.task_id;

-- event_list_for_task --
-- A task's events after a sequence number, oldest first.
SELECT e.seq, e.kind, e.payload, e.created_at
FROM deploy_task_events e JOIN deploy_tasks t ON t.id = e.task_id
WHERE e.task_id = %(task_id)s AND t.namespace = %(namespace)s AND e.seq > %(after_seq)s
ORDER BY e.seq LIMIT %(limit)s;

-- event_list_tail_for_task --
-- A task's last events, newest first (what explain shows of a long history).
SELECT e.seq, e.kind, e.payload, e.created_at
FROM deploy_task_events e JOIN deploy_tasks t ON t.id = e.task_id
WHERE e.task_id = %(task_id)s AND t.namespace = %(namespace)s
ORDER BY e.seq DESC LIMIT %(limit)s;
