-- Queries on deploy_tasks. Every status write is task_transition; every runner write is fenced
-- on (lease_epoch, lease_owner) and named *_if_held. Times take coalesce(%(now)s, now()) so tests
-- can pin the database clock.

-- task_checkpoint_if_held --
-- Whether a cancel is pending, for the holder of the lease; no row means the lease is lost.
SELECT cancel_requested_at IS NOT NULL AS cancel_pending
FROM deploy_tasks
WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
  AND status IN ('running', 'applying');

-- task_count_active_by_status --
-- Active tasks by status and source kind (metrics): each status is a partial-index or small scan.
SELECT status::text AS status, source_kind, count(*) AS n
FROM deploy_tasks
WHERE status IN ('queued', 'running', 'blocked', 'applying')
GROUP BY status, source_kind;

-- task_get --
-- One task of a workspace with the id of its newest clone (what a page or a stream shows).
SELECT t.*, (SELECT s.id FROM deploy_tasks s
             WHERE s.workspace = t.workspace AND s.retried_from_task_id = t.id
             ORDER BY s.created_at DESC LIMIT 1) AS successor_id
FROM deploy_tasks t WHERE t.id = %(task_id)s AND t.workspace = %(workspace)s;

-- task_get_active_of_app --
-- The newest active task of an app (a rollback waits for it: one deployment of an app at a time).
SELECT * FROM deploy_tasks
WHERE workspace = %(workspace)s AND project_id = %(project_id)s AND app_key = %(app_key)s
  AND status IN ('queued', 'running', 'blocked', 'applying')
ORDER BY created_at DESC, id DESC LIMIT 1;

-- task_get_any_workspace --
-- One task whatever its workspace (operator tools only; every request path is workspace-scoped).
SELECT * FROM deploy_tasks WHERE id = %(task_id)s;

-- task_get_devbox_state --
-- What a devbox pause job re-checks: the task's status and devbox, and whether an active task
-- shares that devbox.
SELECT t.id, t.status, t.devbox_id, t.devbox_paused_at,
       EXISTS (SELECT 1 FROM deploy_tasks a
               WHERE a.devbox_id = t.devbox_id AND a.id <> t.id
                 AND a.status IN ('queued', 'running', 'blocked', 'applying')) AS devbox_in_use
FROM deploy_tasks t WHERE t.id = %(task_id)s;

-- task_get_lease_state --
-- The lease facts a process needs to decide whether its local runner must stop.
SELECT id, status, lease_owner, lease_epoch, cancel_requested_at
FROM deploy_tasks WHERE id = %(task_id)s;

-- task_get_successor --
-- The newest task cloned from a predecessor, if any.
SELECT id, status FROM deploy_tasks
WHERE workspace = %(workspace)s AND retried_from_task_id = %(task_id)s
ORDER BY created_at DESC, id DESC LIMIT 1;

-- task_insert --
-- Insert a queued task %(id)s with its 'created' event; its id back (the claim that follows
-- reads the whole row). It does not notify: the process that inserts a task claims it next, and
-- the claim's runner notice announces both
-- (engine/core/notices.py). No row back: that id exists already (this insert sent again after a
-- lost connection), or another clone of the predecessor is active (the one-clone index).
WITH created AS (
    INSERT INTO deploy_tasks (id, workspace, project_id, created_by, source_kind, runner, source,
                              sensitive_keys, artifact_summary, retried_from_task_id,
                              rolled_back_from_task_id)
    VALUES (%(id)s, %(workspace)s, %(project_id)s, %(created_by)s, %(source_kind)s, %(runner)s,
            %(source)s, %(sensitive_keys)s, %(artifact_summary)s, %(retried_from_task_id)s,
            %(rolled_back_from_task_id)s)
    ON CONFLICT DO NOTHING
    RETURNING *
), recorded AS (
    INSERT INTO deploy_task_events (task_id, kind, payload)
    SELECT id, 'created', jsonb_build_object(
        'sourceKind', source_kind, 'retriedFromTaskId', retried_from_task_id)
        || CASE WHEN rolled_back_from_task_id IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('rolledBackFromTaskId', rolled_back_from_task_id) END
    FROM created
)
SELECT id FROM created;

-- task_list_app_page --
-- One page of an app's history, newest first, after the (created_at, id) cursor: every task of
-- the app whatever its status, until retention purges it.
SELECT * FROM deploy_tasks
WHERE workspace = %(workspace)s AND project_id = %(project_id)s AND app_key = %(app_key)s
  AND (%(cursor_created_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(cursor_created_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- task_list_app_resources --
-- What an app left in the cluster: each resource (kind, name) as the newest of the app's last 50
-- deployments that applied anything recorded it, with that task's id and status.
SELECT DISTINCT ON (r ->> 'kind', r ->> 'name') r AS resource, t.id AS task_id, t.status
FROM (
    SELECT id, status, created_at, artifact_summary -> 'appliedResources' AS applied
    FROM deploy_tasks
    WHERE workspace = %(workspace)s AND project_id = %(project_id)s AND app_key = %(app_key)s
      AND jsonb_typeof(artifact_summary -> 'appliedResources') = 'array'
      AND jsonb_array_length(artifact_summary -> 'appliedResources') > 0
    ORDER BY created_at DESC, id DESC
    LIMIT 50
) t
CROSS JOIN jsonb_array_elements(t.applied) AS r
WHERE jsonb_typeof(r) = 'object'
ORDER BY r ->> 'kind', r ->> 'name', t.created_at DESC, t.id DESC;

-- task_list_apps_of_project --
-- A project's apps (optionally one, %(app_key)s), each as its newest task, newest first.
SELECT newest.*
FROM (
    SELECT DISTINCT ON (t.app_key) t.*
    FROM deploy_tasks t
    WHERE t.workspace = %(workspace)s AND t.project_id = %(project_id)s AND t.app_key IS NOT NULL
      AND (%(app_key)s::text IS NULL OR t.app_key = %(app_key)s::text)
    ORDER BY t.app_key, t.created_at DESC, t.id DESC
) newest
ORDER BY newest.created_at DESC, newest.id DESC
LIMIT %(limit)s;

-- task_list_for_operator --
-- The newest tasks across workspaces, optionally of one workspace, project or statuses.
SELECT * FROM deploy_tasks
WHERE (%(workspace)s::text IS NULL OR workspace = %(workspace)s)
  AND (%(project_id)s::text IS NULL OR project_id = %(project_id)s)
  AND (%(statuses)s::task_status[] IS NULL OR status = ANY(%(statuses)s::task_status[]))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- task_list_ids_active_with_devbox --
-- Active tasks that reference a devbox (a devbox delete must not pull it from under them).
SELECT id FROM deploy_tasks
WHERE devbox_id = %(devbox_id)s AND status IN ('queued', 'running', 'blocked', 'applying')
LIMIT 5;

-- task_list_ids_cancel_overdue --
-- Active tasks whose cancel request is older than the acknowledgement deadline, whatever their
-- status: a cancel is recorded on a leased task, but it must end the task wherever it went since.
SELECT id FROM deploy_tasks
WHERE status IN ('queued', 'running', 'blocked', 'applying') AND cancel_requested_at IS NOT NULL
  AND cancel_requested_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(deadline_s)s)
ORDER BY cancel_requested_at LIMIT %(limit)s;

-- task_list_ids_lease_expired --
-- Leased tasks whose lease has expired: their owning process is gone.
SELECT id FROM deploy_tasks
WHERE status IN ('running', 'applying')
  AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
ORDER BY lease_expires_at LIMIT %(limit)s;

-- task_list_ids_queued_overdue --
-- Queued tasks past the start deadline (a crash between insert and claim).
SELECT id FROM deploy_tasks
WHERE status = 'queued'
  AND created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(deadline_s)s)
ORDER BY created_at LIMIT %(limit)s;

-- task_list_ids_run_overdue --
-- Leased tasks claimed longer ago than the maximum active run.
SELECT id FROM deploy_tasks
WHERE status IN ('running', 'applying')
  AND lease_claimed_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(deadline_s)s)
ORDER BY lease_claimed_at LIMIT %(limit)s;

-- task_list_moved_by_key --
-- The tasks among %(task_ids)s that a status move recorded under %(key)s moved: a transition
-- sent again after a lost connection finds here that its first attempt already committed.
SELECT t.* FROM deploy_tasks t
WHERE t.id = ANY(%(task_ids)s::uuid[])
  AND EXISTS (SELECT 1 FROM deploy_task_events e WHERE e.task_id = t.id AND e.key = %(key)s);

-- task_list_page --
-- One page of a workspace's tasks, newest first, after the (created_at, id) cursor.
SELECT * FROM deploy_tasks
WHERE workspace = %(workspace)s
  AND (%(project_id)s::text IS NULL OR project_id = %(project_id)s)
  AND (%(statuses)s::task_status[] IS NULL OR status = ANY(%(statuses)s::task_status[]))
  AND (%(cursor_created_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(cursor_created_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- task_list_project_board --
-- One page of what a project's dock and canvas show, newest first: every active task, every
-- failed task not yet redeployed (it keeps attention however old: no time cap), and the other
-- finished tasks within the grace window; with the id of the newest clone of each. Paged on
-- (created_at, id) after the cursor, like the task list.
SELECT t.*, (SELECT s.id FROM deploy_tasks s
             WHERE s.workspace = t.workspace AND s.retried_from_task_id = t.id
             ORDER BY s.created_at DESC LIMIT 1) AS successor_id
FROM deploy_tasks t
WHERE t.workspace = %(workspace)s AND t.project_id = %(project_id)s
  AND (t.status IN ('queued', 'running', 'blocked', 'applying')
       OR t.finished_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window_s)s)
       OR (t.status = 'failed' AND NOT EXISTS (
               SELECT 1 FROM deploy_tasks s
               WHERE s.workspace = t.workspace AND s.retried_from_task_id = t.id)))
  AND (%(cursor_created_at)s::timestamptz IS NULL
       OR (t.created_at, t.id) < (%(cursor_created_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY t.created_at DESC, t.id DESC
LIMIT %(limit)s;

-- task_mark_devbox_paused --
-- Record that the task's devbox was paused (by its runner, the reaper or a cleanup job).
UPDATE deploy_tasks SET devbox_paused_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(task_id)s AND devbox_id = %(devbox_id)s AND devbox_paused_at IS NULL
RETURNING id;

-- task_record_sensitive_keys_if_held --
-- Add input names to the task's sensitive keys (names only, never values) for the holder of the
-- lease: names declared sensitive with an answer are scrubbed and re-asked like any other.
UPDATE deploy_tasks SET
    sensitive_keys = ARRAY(SELECT DISTINCT k FROM unnest(sensitive_keys || %(names)s::text[]) AS k
                           ORDER BY k),
    updated_at = now()
WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
  AND status = 'running'
RETURNING *;

-- task_renew_leases_if_held --
-- Extend every lease this process holds in one statement; the rows back are the leases still
-- held, each saying whether a cancel is pending.
WITH held AS (
    SELECT * FROM unnest(%(task_ids)s::uuid[], %(epochs)s::bigint[]) AS h(id, epoch)
)
UPDATE deploy_tasks t
SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease_ttl_s)s)
FROM held
WHERE t.id = held.id AND t.lease_epoch = held.epoch AND t.lease_owner = %(owner)s
  AND t.status IN ('running', 'applying')
RETURNING t.id, t.cancel_requested_at IS NOT NULL AS cancel_pending;

-- task_request_cancel_if_leased --
-- Record a cancel request on a running or applying task (first request wins), and notify.
WITH marked AS (
    UPDATE deploy_tasks SET cancel_requested_at = coalesce(%(now)s::timestamptz, now()), updated_at = now()
    WHERE id = %(task_id)s AND workspace = %(workspace)s
      AND status IN ('running', 'applying') AND cancel_requested_at IS NULL
    RETURNING *
), recorded AS (
    INSERT INTO deploy_task_events (task_id, kind, payload)
    SELECT id, 'cancel_requested', jsonb_build_object('by', %(requested_by)s::text) FROM marked
)
SELECT m.*, notify_task_changed(m.workspace, m.project_id, m.id, status => m.status,
                               epoch => m.lease_epoch, owner => m.lease_owner,
                               cancel => true) AS notified
FROM marked m;

-- task_set_canvas --
-- Save where a task's placeholder sits on the canvas (never touches status), and notify.
WITH changed AS (
    UPDATE deploy_tasks SET canvas = %(canvas)s, updated_at = now()
    WHERE id = %(task_id)s AND workspace = %(workspace)s
    RETURNING *
)
SELECT c.*, notify_task_changed(c.workspace, c.project_id, c.id) AS notified
FROM changed c;

-- task_set_devbox_if_held --
-- Record the task's devbox (so the engine can pause it if the runner dies), for the lease holder,
-- with its task_runtimes row (a remote runtime: kept until its deletion is confirmed). The owner
-- id starts with the host name (engine/process.py).
WITH task AS (
    UPDATE deploy_tasks SET devbox_id = %(devbox_id)s, devbox_paused_at = NULL, updated_at = now()
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
      AND status IN ('running', 'applying')
    RETURNING id, workspace
), tracked AS (
    INSERT INTO task_runtimes (task_id, workspace, kind, liveness, label, host, owner, remote_id)
    SELECT id, workspace, 'devbox', 'remote', 'devbox', split_part(%(owner)s, ':', 1), %(owner)s,
           %(devbox_id)s
    FROM task
    ON CONFLICT (remote_id) WHERE kind = 'devbox' DO UPDATE
    SET task_id = EXCLUDED.task_id, workspace = EXCLUDED.workspace, host = EXCLUDED.host,
        owner = EXCLUDED.owner, updated_at = now()
)
SELECT id FROM task;

-- task_strip_source_keys_if_held --
-- Remove keys from one map of the persisted source and record their names as sensitive, for the
-- holder of the lease (a runner's authoritative re-scrub: it can only remove), and notify.
WITH changed AS (
    UPDATE deploy_tasks SET
        source = CASE WHEN jsonb_typeof(source -> %(field)s::text) = 'object'
                      THEN jsonb_set(source, ARRAY[%(field)s::text],
                                     (source -> %(field)s::text) - %(names)s::text[])
                      ELSE source END,
        sensitive_keys = ARRAY(SELECT DISTINCT k FROM unnest(sensitive_keys || %(names)s::text[]) AS k
                               ORDER BY k),
        updated_at = now()
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
      AND status IN ('running', 'applying')
    RETURNING id, workspace, project_id
)
SELECT c.id, notify_task_changed(c.workspace, c.project_id, c.id) AS notified
FROM changed c;

-- task_transition --
-- THE status write (engine/core/transitions.py, a Move): move tasks to %(to)s from one of
-- %(from_statuses)s where every precondition asked holds, record the verdict event under
-- %(move_key)s (a statement sent again after a lost connection finds its own move by it) and
-- notify (unless %(notify)s is false: a runner's own move, which its process announces with its
-- runner notices), in one statement, returning the whole moved rows. A lease holder's move also
-- records its timeline steps before the verdict (%(steps)s, '[]' for none) and merges
-- %(patch)s into the artifact summary: what ends a run, or begins applying, is one statement.
-- No row back: not allowed from here, or fenced off. Each optional precondition is NULL (or
-- false) when not asked. task_transition_moved is this statement returning fewer columns.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), moved AS (
    UPDATE deploy_tasks t SET
        -- SET reads the old row: this is what the move came from, with no extra lock or scan.
        previous_status = t.status,
        status = %(to)s::task_status,
        phase = coalesce(%(phase)s::text, t.phase),
        -- A lease holder's move may merge keys into the artifact summary (engine/core/handle.py).
        artifact_summary = CASE WHEN %(patch)s::jsonb IS NULL THEN t.artifact_summary
                                ELSE t.artifact_summary || %(patch)s::jsonb END,
        lease_epoch = CASE WHEN %(claim_owner)s::text IS NOT NULL
                           THEN t.lease_epoch + 1 ELSE t.lease_epoch END,
        lease_owner = CASE WHEN %(claim_owner)s::text IS NOT NULL THEN %(claim_owner)s::text
                           WHEN %(to)s::task_status IN ('running', 'applying') THEN t.lease_owner END,
        lease_expires_at = CASE
            WHEN %(claim_owner)s::text IS NOT NULL
                THEN clock.now + make_interval(secs => %(claim_ttl_s)s::float8)
            WHEN %(to)s::task_status IN ('running', 'applying') THEN t.lease_expires_at END,
        lease_claimed_at = CASE WHEN %(claim_owner)s::text IS NOT NULL
                                THEN clock.now ELSE t.lease_claimed_at END,
        failure_reason = CASE WHEN %(to)s::task_status = 'failed'
                              THEN %(reason)s::text ELSE t.failure_reason END,
        failure_message = CASE WHEN %(to)s::task_status = 'failed'
                               THEN %(message)s::text ELSE t.failure_message END,
        cancel_requested_at = CASE WHEN %(to)s::task_status = 'cancelled'
                                   THEN coalesce(t.cancel_requested_at, clock.now)
                                   ELSE t.cancel_requested_at END,
        finished_at = CASE WHEN %(to)s::task_status IN ('completed', 'failed', 'cancelled')
                           THEN clock.now END,
        updated_at = clock.now
    FROM clock, (
        -- The LIMIT never cuts (ids are unique): it lets the planner cost the generic plan at
        -- one row per id instead of ten, so the prepared statement is not re-planned every call.
        SELECT id FROM unnest(%(task_ids)s::uuid[]) AS u(id) LIMIT cardinality(%(task_ids)s::uuid[])
    ) AS wanted
    WHERE t.id = wanted.id
      AND t.status = ANY(%(from_statuses)s::task_status[])
      AND (%(workspace)s::text IS NULL OR t.workspace = %(workspace)s::text)
      AND (%(fence_epoch)s::bigint IS NULL
           OR (t.lease_epoch = %(fence_epoch)s::bigint AND t.lease_owner = %(fence_owner)s::text))
      AND (%(if_lease_expired)s::bool IS NOT TRUE OR t.lease_expires_at < clock.now)
      AND (%(if_cancel_pending)s::bool IS NULL
           OR (t.cancel_requested_at IS NOT NULL) = %(if_cancel_pending)s::bool)
      AND (%(cancel_older_than_s)s::float8 IS NULL
           OR t.cancel_requested_at < clock.now - make_interval(secs => %(cancel_older_than_s)s::float8))
      AND (%(claimed_older_than_s)s::float8 IS NULL
           OR t.lease_claimed_at < clock.now - make_interval(secs => %(claimed_older_than_s)s::float8))
      AND (%(created_older_than_s)s::float8 IS NULL
           OR t.created_at < clock.now - make_interval(secs => %(created_older_than_s)s::float8))
    RETURNING t.*
), recorded AS (
    -- A lease holder's steps (%(steps)s, a JSON array of {kind, payload}) and then the verdict
    -- event, in that order: ORDER BY makes the sequence numbers follow it. The steps need no key:
    -- they are inserted only with a move, and the verdict's key keeps a move from being made twice.
    INSERT INTO deploy_task_events (task_id, kind, payload, key)
    SELECT m.id, e.kind, e.payload, e.key
    FROM moved m CROSS JOIN LATERAL (
        SELECT s.event ->> 'kind', s.event -> 'payload', NULL::text, s.n
        FROM jsonb_array_elements(%(steps)s::jsonb) WITH ORDINALITY AS s(event, n)
        UNION ALL
        SELECT 'status', jsonb_strip_nulls(jsonb_build_object(
            'from', m.previous_status, 'to', m.status,
            'verdict', %(verdicts)s::jsonb ->> m.previous_status::text,
            'reason', %(reason)s::text, 'message', %(message)s::text, 'by', %(actor)s::text)),
            %(move_key)s::text, NULL
    ) AS e(kind, payload, key, n)
    ORDER BY m.id, e.n NULLS LAST
)
SELECT m.*, CASE WHEN %(notify)s::bool THEN
           notify_task_changed(m.workspace, m.project_id, m.id, status => m.status,
                               epoch => m.lease_epoch, owner => m.lease_owner,
                               cancel => m.cancel_requested_at IS NOT NULL) END AS notified
FROM moved m;

-- task_transition_moved --
-- task_transition returning only what a mover reads back: the moved row's identity and project,
-- statuses, lease, pending cancel and times (metrics). A runner's own move, a shutdown and the
-- reaper hand no row on; loading the whole task row (26 columns, jsonb among them) was an eighth
-- to a fifth of a transition's client CPU (BENCHMARKS.md, "Requests first"). Written once: the
-- query loader (engine/sql/__init__.py) derives its text from task_transition's, whose final
-- `SELECT m.*` becomes this select list; both are prepared statements of their own.
= task_transition SELECT m.id, m.workspace, m.project_id, m.status, m.previous_status,
    m.lease_epoch, m.lease_owner, m.cancel_requested_at, m.created_at, m.finished_at

-- task_write_if_held --
-- A runner's write, for the holder of the lease, in one statement: append events in order
-- (%(events)s, a JSON array of {kind, payload}; %(write_key)s names them), merge keys into the
-- artifact summary (when %(patch)s is given) and set the phase (when %(phase)s is); say whether a cancel is pending,
-- which is what a checkpoint right after it would read. No row back: the lease is lost. It does
-- not notify: the writing process announces it with its runner notices (tasks_notify_runner).
-- FOR NO KEY UPDATE: the check and the writes see the same task. Without the row lock a
-- transition committing meanwhile goes unseen (READ COMMITTED reads the statement's snapshot) and
-- the event lands after the terminal one; with it, this waits for that transition and re-checks.
WITH holder AS (
    SELECT id, workspace, project_id, status, lease_epoch, lease_owner, cancel_requested_at
    FROM deploy_tasks
    WHERE id = %(task_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
      AND status IN ('running', 'applying')
    FOR NO KEY UPDATE
), changed AS (
    UPDATE deploy_tasks t SET
        artifact_summary = t.artifact_summary || coalesce(%(patch)s::jsonb, '{}'::jsonb),
        phase = coalesce(%(phase)s::text, t.phase),
        updated_at = now()
    FROM holder h
    WHERE t.id = h.id AND (%(patch)s::jsonb IS NOT NULL OR %(phase)s::text IS NOT NULL)
), appended AS (
    -- ORDER BY: the sequence numbers follow the array's order. Each event's key is the write's
    -- key and its place in it: the same write sent again (after a lost connection) adds nothing.
    INSERT INTO deploy_task_events (task_id, kind, payload, key)
    SELECT h.id, e.event ->> 'kind', e.event -> 'payload', %(write_key)s::text || '.' || e.n
    FROM holder h
    CROSS JOIN jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS e(event, n)
    ORDER BY e.n
    ON CONFLICT (task_id, key) WHERE key IS NOT NULL DO NOTHING
)
SELECT h.cancel_requested_at IS NOT NULL AS cancel_pending, h.workspace, h.project_id
FROM holder h;

-- tasks_notify_runner --
-- One tick's runner notices of a process (engine/core/notices.py): notify each task its runners wrote
-- to (%(tasks)s, a JSON array of {workspace, project, task}), marked "runner".
SELECT count(notify_task_changed(t ->> 'workspace', t ->> 'project', (t ->> 'task')::uuid,
                                 runner => true)) AS notified
FROM jsonb_array_elements(%(tasks)s::jsonb) AS t;
