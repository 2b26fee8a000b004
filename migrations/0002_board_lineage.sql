-- The board keeps every failed task that was not redeployed, however old: finding out whether a
-- task has a clone must not scan the project. Every clone, active or not (the unique index
-- deploy_tasks_one_active_clone covers active clones only).
CREATE INDEX deploy_tasks_by_predecessor
    ON deploy_tasks (namespace, retried_from_task_id)
    WHERE retried_from_task_id IS NOT NULL;
