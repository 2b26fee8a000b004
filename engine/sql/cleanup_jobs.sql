-- Queries on cleanup_jobs: durable cleanup intents (seed 001). A claim is `attempts + 1`; every
-- finish is guarded on (state = 'running', attempts) so a stale worker cannot overwrite a newer
-- attempt. Times take coalesce(%(now)s, now()) so tests can pin the clock.
--
-- The purge statements commit without waiting for the WAL flush: set_config(...,
-- 'synchronous_commit', 'off', true) in the RETURNING of the rows they write (this transaction
-- only; never in `clock`, whose volatility would stop it being inlined and the retention cutoff
-- bounding the index scan). A crash can lose their last fraction of a second, never half of one:
-- jobs and the rows they delete commit together, and a lost purge is simply done again.

-- cleanup_job_claim_due --
-- Claim due jobs of some triggers this worker can run (a running job past its deadline was abandoned).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), due AS (
    SELECT j.id FROM cleanup_jobs j
    WHERE j.state IN ('pending', 'retry_wait', 'running')
      AND j.trigger = ANY(%(triggers)s::cleanup_trigger[])
      AND j.next_attempt_at <= (SELECT now FROM clock)
      AND j.attempts < %(max_attempts)s
      AND (j.host IS NULL OR j.host = %(host)s)
      AND (%(has_devbox)s OR NOT j.needs_devbox)
    ORDER BY j.next_attempt_at, j.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE cleanup_jobs j
SET state = 'running', attempts = j.attempts + 1, claimed_by = %(worker)s,
    next_attempt_at = clock.now + make_interval(secs => %(attempt_timeout_s)s::float8),
    updated_at = clock.now
FROM due, clock
WHERE j.id = due.id
RETURNING j.*;

-- cleanup_job_claim_purges_with_devbox --
-- Claim due purges of tasks with a devbox (deleted first), with what each re-checks: whether the
-- task still exists and is finished and past retention, and whether an active task uses the devbox.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), due AS (
    SELECT j.id FROM cleanup_jobs j
    WHERE j.trigger = 'retention_purge' AND j.state IN ('pending', 'retry_wait', 'running')
      AND j.needs_devbox
      AND j.next_attempt_at <= (SELECT now FROM clock)
      AND j.attempts < %(max_attempts)s
    ORDER BY j.next_attempt_at, j.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    UPDATE cleanup_jobs j
    SET state = 'running', attempts = j.attempts + 1, claimed_by = %(worker)s,
        next_attempt_at = clock.now + make_interval(secs => %(attempt_timeout_s)s::float8),
        updated_at = clock.now
    FROM due, clock
    WHERE j.id = due.id
    RETURNING j.id, j.attempts, j.trigger, j.operation_id, j.task_id, j.snapshot
)
SELECT c.*, c.snapshot ->> 'workspace' AS workspace,
       coalesce(t.devbox_id, c.snapshot ->> 'devboxId') AS devbox_id,
       t.id IS NOT NULL AS task_exists,
       coalesce(task_expired(t.status, t.finished_at,
                             clock.now - make_interval(secs => %(retention_s)s::float8)),
                false) AS expired,
       EXISTS (SELECT 1 FROM deploy_tasks a
               WHERE a.devbox_id = coalesce(t.devbox_id, c.snapshot ->> 'devboxId')
                 AND a.id IS DISTINCT FROM t.id
                 AND a.status IN ('queued', 'running', 'blocked', 'applying')) AS devbox_in_use
FROM claimed c CROSS JOIN clock
LEFT JOIN deploy_tasks t ON t.id = c.task_id;

-- cleanup_job_count_by_state --
-- Cleanup jobs and the attempts they made, by trigger and state (metrics).
SELECT trigger::text AS trigger, state::text AS state, count(*) AS n,
       coalesce(sum(attempts), 0) AS attempts
FROM cleanup_jobs GROUP BY trigger, state;

-- cleanup_job_delete_completed --
-- Forget succeeded and cancelled jobs completed before the cutoff (failed ones stay for diagnosis).
DELETE FROM cleanup_jobs WHERE id IN (
    SELECT id FROM cleanup_jobs
    WHERE state IN ('succeeded', 'cancelled')
      AND completed_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s::float8)
    ORDER BY completed_at LIMIT %(limit)s
);

-- cleanup_job_enqueue --
-- Record a cleanup intent with its snapshot. A job of the same operation that is still open (or
-- failed for good) is returned instead: a repeated trigger reuses it.
WITH existing AS (
    (SELECT * FROM cleanup_jobs
     WHERE operation_id = %(operation_id)s AND state IN ('pending', 'running', 'retry_wait'))
    UNION ALL
    (SELECT * FROM cleanup_jobs
     WHERE operation_id = %(operation_id)s AND state = 'failed' ORDER BY id DESC LIMIT 1)
    LIMIT 1
), inserted AS (
    INSERT INTO cleanup_jobs (operation_id, trigger, task_id, workspace, snapshot, host,
                              needs_devbox, next_attempt_at)
    SELECT %(operation_id)s, %(trigger)s::cleanup_trigger, %(task_id)s, %(workspace)s,
           %(snapshot)s, %(host)s, %(needs_devbox)s, coalesce(%(now)s::timestamptz, now())
    WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (operation_id) WHERE state IN ('pending', 'running', 'retry_wait') DO NOTHING
    RETURNING *
)
SELECT *, true AS created FROM inserted
UNION ALL
SELECT *, false AS created FROM existing;

-- cleanup_job_enqueue_devbox_pauses --
-- Reaper: a pause job for each finished task whose devbox was never paused (oldest first).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
INSERT INTO cleanup_jobs (operation_id, trigger, task_id, workspace, snapshot, needs_devbox,
                          next_attempt_at)
SELECT 'devbox_pause:' || t.id || ':' || t.devbox_id, 'devbox_pause', t.id, t.workspace,
       jsonb_build_object('taskId', t.id, 'workspace', t.workspace, 'projectId', t.project_id,
                          'status', t.status, 'finishedAt', t.finished_at,
                          'devboxId', t.devbox_id),
       true, clock.now
FROM deploy_tasks t, clock
WHERE t.status IN ('completed', 'failed', 'cancelled')
  AND t.devbox_id IS NOT NULL AND t.devbox_paused_at IS NULL
  AND t.finished_at < clock.now - make_interval(secs => %(grace_s)s::float8)
  AND NOT EXISTS (
      SELECT 1 FROM deploy_tasks a
      WHERE a.devbox_id = t.devbox_id
        AND a.status IN ('queued', 'running', 'blocked', 'applying'))
  -- OFFSET 0 keeps each NOT EXISTS an index probe per candidate: as an anti-join on stale
  -- statistics it was planned as a nested loop over every open job.
  AND NOT EXISTS (
      SELECT 1 FROM cleanup_jobs j
      WHERE j.operation_id = 'devbox_pause:' || t.id || ':' || t.devbox_id
        AND j.state IN ('pending', 'running', 'retry_wait') OFFSET 0)
  -- A job that failed for good (8 attempts) is re-minted only after the cool-down: the work is
  -- never stranded (seed 000), and a long outage costs one fresh ladder per cool-down.
  AND NOT EXISTS (
      SELECT 1 FROM cleanup_jobs j
      WHERE j.operation_id = 'devbox_pause:' || t.id || ':' || t.devbox_id AND j.state = 'failed'
        AND j.completed_at > clock.now - make_interval(secs => %(cooldown_s)s::float8)
      OFFSET 0)
ORDER BY t.finished_at
LIMIT %(limit)s
ON CONFLICT (operation_id) WHERE state IN ('pending', 'running', 'retry_wait') DO NOTHING
RETURNING id, EXISTS (SELECT 1 FROM cleanup_jobs f
                      WHERE f.operation_id = cleanup_jobs.operation_id
                        AND f.state = 'failed') AS after_failure;

-- cleanup_job_enqueue_purges --
-- Reaper: a purge job for each finished task past retention (oldest first), its handles captured.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
INSERT INTO cleanup_jobs (operation_id, trigger, task_id, workspace, snapshot, needs_devbox,
                          next_attempt_at)
SELECT 'retention_purge:' || t.id, 'retention_purge', t.id, t.workspace,
       jsonb_build_object('taskId', t.id, 'workspace', t.workspace, 'projectId', t.project_id,
                          'status', t.status, 'finishedAt', t.finished_at,
                          'devboxId', t.devbox_id,
                          'runtimes', (SELECT jsonb_agg(to_jsonb(r)) FROM task_runtimes r
                                       WHERE r.task_id = t.id)),
       t.devbox_id IS NOT NULL, clock.now
FROM deploy_tasks t, clock
WHERE task_expired(t.status, t.finished_at,
                   clock.now - make_interval(secs => %(retention_s)s::float8))
  -- OFFSET 0: an index probe per candidate whatever the statistics say (see above).
  AND NOT EXISTS (
      SELECT 1 FROM cleanup_jobs j
      WHERE j.operation_id = 'retention_purge:' || t.id
        AND j.state IN ('pending', 'running', 'retry_wait') OFFSET 0)
  -- Failed for good: re-minted after the cool-down (as for devbox pauses above).
  AND NOT EXISTS (
      SELECT 1 FROM cleanup_jobs j
      WHERE j.operation_id = 'retention_purge:' || t.id AND j.state = 'failed'
        AND j.completed_at > clock.now - make_interval(secs => %(cooldown_s)s::float8) OFFSET 0)
ORDER BY t.finished_at
LIMIT %(limit)s
ON CONFLICT (operation_id) WHERE state IN ('pending', 'running', 'retry_wait') DO NOTHING
RETURNING id, set_config('synchronous_commit', 'off', true) AS async_commit,
          EXISTS (SELECT 1 FROM cleanup_jobs f
                  WHERE f.operation_id = cleanup_jobs.operation_id
                    AND f.state = 'failed') AS after_failure;

-- cleanup_job_fail_if_abandoned --
-- A claim on the last attempt whose worker never finished: terminal failed, never claimed again.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
UPDATE cleanup_jobs j
SET state = 'failed', next_attempt_at = NULL, completed_at = clock.now, updated_at = clock.now,
    last_error = 'attempt ' || j.attempts || ' abandoned by ' || coalesce(j.claimed_by, '?')
                 || coalesce('; before that: ' || j.last_error, '')
FROM clock
WHERE j.state = 'running' AND j.next_attempt_at <= clock.now AND j.attempts >= %(max_attempts)s
RETURNING j.id;

-- cleanup_job_finish_if_claimed --
-- End claimed attempts as succeeded or cancelled (a note replaces last_error when given).
WITH done AS (
    SELECT * FROM unnest(%(job_ids)s::bigint[], %(attempts)s::int[]) AS d(id, attempts)
), clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
UPDATE cleanup_jobs j
SET state = %(state)s::cleanup_job_state, next_attempt_at = NULL, completed_at = clock.now,
    last_error = coalesce(%(note)s::text, j.last_error), updated_at = clock.now
FROM done, clock
WHERE j.id = done.id AND j.attempts = done.attempts AND j.state = 'running'
  AND %(state)s::cleanup_job_state IN ('succeeded', 'cancelled')
RETURNING j.id;

-- cleanup_job_get --
-- One cleanup job.
SELECT * FROM cleanup_jobs WHERE id = %(job_id)s;

-- cleanup_job_list --
-- The newest cleanup jobs, optionally of some states (operator tools).
SELECT * FROM cleanup_jobs
WHERE (%(states)s::cleanup_job_state[] IS NULL OR state = ANY(%(states)s::cleanup_job_state[]))
ORDER BY id DESC
LIMIT %(limit)s;

-- cleanup_job_note_if_unclaimable --
-- Say why due devbox jobs wait when this process has no devbox integration (once per job).
UPDATE cleanup_jobs
SET last_error = %(note)s, updated_at = now()
WHERE needs_devbox AND state = 'pending' AND last_error IS NULL
  AND next_attempt_at <= coalesce(%(now)s::timestamptz, now())
RETURNING id;

-- cleanup_job_purge --
-- THE retention purge, in one statement: delete each task still finished and past retention
-- (events and messages cascade, its devbox and resume-only runtime rows go with it) and notify its
-- removal; a task already gone is done; one no longer past retention cancels its job. Its jobs:
-- %(job_ids)s, purges claimed earlier whose devbox is deleted (guarded on (state, attempts) =
-- %(attempts)s); or, when %(job_ids)s is NULL, due purges of tasks without a devbox, claimed,
-- run and finished here (one attempt each), a task that has a devbox after all sending its job
-- to the devbox path.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), due AS (
    SELECT j.id, j.task_id FROM cleanup_jobs j
    WHERE %(job_ids)s::bigint[] IS NULL
      AND j.trigger = 'retention_purge' AND j.state IN ('pending', 'retry_wait', 'running')
      AND NOT j.needs_devbox
      AND j.next_attempt_at <= (SELECT now FROM clock)
      AND j.attempts < %(max_attempts)s
    ORDER BY j.next_attempt_at, j.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    SELECT j.id, j.task_id FROM cleanup_jobs j
    JOIN unnest(%(job_ids)s::bigint[], %(attempts)s::int[]) AS c(id, attempts)
      ON c.id = j.id AND c.attempts = j.attempts
    WHERE j.state = 'running'
    FOR UPDATE OF j
), jobs AS (
    -- devbox_done: claimed earlier, its devbox deleted; the task may go although it has one.
    SELECT id, task_id, false AS devbox_done FROM due
    UNION ALL
    SELECT id, task_id, true FROM claimed
), purged AS (
    DELETE FROM deploy_tasks t USING jobs, clock
    WHERE t.id = jobs.task_id AND (t.devbox_id IS NULL OR jobs.devbox_done)
      AND task_expired(t.status, t.finished_at,
                       clock.now - make_interval(secs => %(retention_s)s::float8))
    RETURNING t.id, t.workspace, t.project_id
), released AS (
    DELETE FROM task_runtimes r USING purged p
    WHERE r.task_id = p.id AND (r.kind = 'devbox' OR r.status = 'stopped')
), verdict AS (
    -- Every CTE reads the snapshot from before the statement: a purged task is still visible here.
    -- (An uncorrelated IN is a hashed subplan; a join on the CTE would be planned as n x n.)
    SELECT jobs.id, jobs.devbox_done,
           CASE WHEN jobs.task_id IN (SELECT id FROM purged) OR t.id IS NULL THEN 'succeeded'
                WHEN t.devbox_id IS NOT NULL AND NOT jobs.devbox_done THEN 'pending'
                ELSE 'cancelled' END AS state
    FROM jobs
    LEFT JOIN deploy_tasks t ON t.id = jobs.task_id
), finished AS (
    -- A purge claimed here takes its attempt now (a claim earlier took it then).
    UPDATE cleanup_jobs j SET
        state = v.state::cleanup_job_state,
        attempts = j.attempts + CASE WHEN v.devbox_done OR v.state = 'pending' THEN 0 ELSE 1 END,
        needs_devbox = j.needs_devbox OR v.state = 'pending',
        next_attempt_at = CASE WHEN v.state = 'pending' THEN j.next_attempt_at END,
        completed_at = CASE WHEN v.state = 'pending' THEN NULL ELSE clock.now END,
        last_error = CASE WHEN v.state = 'cancelled'
                          THEN 'cancelled: the task is no longer finished and past retention'
                          ELSE j.last_error END,
        claimed_by = CASE WHEN v.devbox_done THEN j.claimed_by ELSE %(worker)s END,
        updated_at = clock.now
    FROM verdict v, clock
    WHERE j.id = v.id
    RETURNING j.id, v.state, set_config('synchronous_commit', 'off', true) AS async_commit
)
SELECT 'purged' AS outcome,
       count(notify_task_changed(p.workspace, p.project_id, p.id, removed => true)) AS n
FROM purged p
UNION ALL
SELECT f.state, count(*) FROM finished f GROUP BY f.state;

-- cleanup_job_retry_if_claimed --
-- A claimed attempt failed: wait the ladder's delay for this attempt, or fail for good after the last.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
UPDATE cleanup_jobs j
SET state = CASE WHEN j.attempts >= %(max_attempts)s THEN 'failed'
                 ELSE 'retry_wait' END::cleanup_job_state,
    next_attempt_at = CASE WHEN j.attempts >= %(max_attempts)s THEN NULL
                           ELSE clock.now + make_interval(
                               secs => (%(delays_s)s::float8[])[j.attempts]) END,
    completed_at = CASE WHEN j.attempts >= %(max_attempts)s THEN clock.now END,
    last_error = %(error)s, updated_at = clock.now
FROM clock
WHERE j.id = %(job_id)s AND j.attempts = %(attempts)s AND j.state = 'running'
RETURNING j.*;

-- cleanup_job_retry_if_failed --
-- An operator gives a job that failed for good a fresh attempt budget (unless another job of the
-- same operation is open), audited as an event of its task when the task still exists.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), revived AS (
    UPDATE cleanup_jobs j
    SET state = 'pending', attempts = 0, next_attempt_at = clock.now, completed_at = NULL,
        claimed_by = NULL, updated_at = clock.now,
        last_error = 'retried by ' || %(actor)s || coalesce('; before that: ' || j.last_error, '')
    FROM clock
    WHERE j.id = %(job_id)s AND j.state = 'failed'
      AND NOT EXISTS (SELECT 1 FROM cleanup_jobs o
                      WHERE o.operation_id = j.operation_id
                        AND o.state IN ('pending', 'running', 'retry_wait'))
    RETURNING j.*
), audited AS (
    INSERT INTO deploy_task_events (task_id, kind, payload)
    SELECT t.id, 'cleanup_retry', jsonb_build_object(
        'jobId', r.id, 'trigger', r.trigger, 'operationId', r.operation_id, 'by', %(actor)s::text)
    FROM revived r JOIN deploy_tasks t ON t.id = r.task_id
    RETURNING task_id
)
SELECT r.*, (SELECT count(notify_task_changed(t.workspace, t.project_id, t.id))
             FROM deploy_tasks t WHERE t.id IN (SELECT task_id FROM audited)) AS audited
FROM revived r;
