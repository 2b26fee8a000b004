-- Writes a process may send twice: after a connection is lost mid-statement the engine cannot
-- tell whether the statement committed, so it sends it again (engine/db.py), and the second
-- attempt must change nothing the first one made.
--
-- `key` names an event by the write that made it: a runner's write gives each of its events
-- "<write id>.<n>" and a status move its own move id. A repeated write inserts its events with
-- ON CONFLICT DO NOTHING on this index, and a guarded transition that moves nothing looks its
-- move id up here to learn that its first attempt already moved the task. NULL for events no
-- retry can repeat (a task's 'created' event comes with its row, a cancel request is guarded
-- by cancel_requested_at IS NULL).
ALTER TABLE deploy_task_events ADD COLUMN IF NOT EXISTS key text;
CREATE UNIQUE INDEX IF NOT EXISTS deploy_task_events_by_key
    ON deploy_task_events (task_id, key) WHERE key IS NOT NULL;
