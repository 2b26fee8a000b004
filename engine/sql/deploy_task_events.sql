-- Queries on deploy_task_events (append-only; seq from one global sequence).

-- event_list_for_task --
-- A task's events after a sequence number, oldest first.
SELECT e.seq, e.kind, e.payload, e.created_at
FROM deploy_task_events e JOIN deploy_tasks t ON t.id = e.task_id
WHERE e.task_id = %(task_id)s AND t.workspace = %(workspace)s AND e.seq > %(after_seq)s
ORDER BY e.seq LIMIT %(limit)s;

-- event_list_tail_for_task --
-- A task's last events, newest first (what explain shows of a long history).
SELECT e.seq, e.kind, e.payload, e.created_at
FROM deploy_task_events e JOIN deploy_tasks t ON t.id = e.task_id
WHERE e.task_id = %(task_id)s AND t.workspace = %(workspace)s
ORDER BY e.seq DESC LIMIT %(limit)s;
