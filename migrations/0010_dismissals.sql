-- A user's dismissals of finished tasks from a project's dock: one row per user and task, kept on
-- the server so a dismissal lasts however many there are and on every browser (they were a
-- 40-id cookie per browser, shared by all projects, so the 41st dismissal brought the first
-- failure back). project_id is the task's own, copied so the dock reads its project's
-- dismissals by the primary key. The row goes with its task: retention's purge (or any delete
-- of the task) cascades here.
CREATE TABLE IF NOT EXISTS dock_dismissals (
    namespace    text NOT NULL,
    user_id      text NOT NULL,
    project_id   text NOT NULL,
    task_id      uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    dismissed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, user_id, project_id, task_id)
);
-- The cascade finds a purged task's rows by this index, not by a scan per deleted task.
CREATE INDEX IF NOT EXISTS dock_dismissals_task_id ON dock_dismissals (task_id);
