-- The reaper's overdue-cancel sweep (task_list_ids_cancel_overdue) reads every active task with a
-- cancel pending, not only the leased ones: a cancel recorded on a running task must end it even
-- if the task went on to park blocked (a rule since, but rows parked so before it stay so until
-- the sweep ends them). Its partial index follows the sweep's predicate.
DROP INDEX deploy_tasks_pending_cancel;
CREATE INDEX deploy_tasks_pending_cancel
    ON deploy_tasks (cancel_requested_at)
    WHERE status IN ('queued', 'running', 'blocked', 'applying') AND cancel_requested_at IS NOT NULL;
