-- The whole current schema, in one file: read this to learn the data model.
--
-- What builds a database is migrations/ (0001 .. the newest), applied in order at boot by
-- engine/operations/migrations.py, which records each in schema_migrations. This file is what they
-- add up to, written as one would write it from scratch, with the why of every table and index.
-- tests/integration/test_schema_sql.py loads this file into one empty database, runs the
-- migrations on another and compares their catalogs (columns, types, defaults, constraints,
-- indexes, functions, triggers, sequences, enum labels, storage options), so the two never drift.
--
-- It is a map, not a way in: the service never loads it (boot applies migrations/ to an empty
-- database too, so every database, new or old, was built the same way).
--
-- Adding a migration? Change this file to match, by hand: the test's failure names every object
-- that differs and shows both definitions. Keep column order as the migrations leave it (a column
-- a migration adds goes last in its table here too).
--
-- Conventions that hold throughout:
-- - `workspace` is the tenant (every query is scoped by it); "namespace" means only a Kubernetes
--   namespace (a task's target_namespace, which no table stores).
-- - Time comparisons happen in SQL against the database clock; queries take
--   `coalesce(%(now)s, now())` so tests can pin it.
-- - Every query the engine runs is a named block in engine/sql/<table>.sql; the index comments
--   below name the queries they serve.

-- ---------------------------------------------------------------------------------------------
-- Types
-- ---------------------------------------------------------------------------------------------

-- A task's status (seed 000). engine/core/status.py is the transition table: which status may move
-- to which, and who moves it; a test checks that the two enums agree.
CREATE TYPE task_status AS ENUM (
    'queued', 'running', 'blocked', 'applying', 'completed', 'failed', 'cancelled');

-- What kind of runtime a task started (seed 001): a local process group or a remote devbox.
CREATE TYPE runtime_kind AS ENUM ('local', 'devbox');

-- Why a cleanup job exists (seed 001).
CREATE TYPE cleanup_trigger AS ENUM (
    'devbox_pause', 'devbox_delete', 'runtime_stop', 'retention_purge');

-- Where a cleanup job is: pending/retry_wait are due at next_attempt_at, running is claimed by
-- one worker until next_attempt_at (its deadline), the last three are terminal.
CREATE TYPE cleanup_job_state AS ENUM (
    'pending', 'running', 'retry_wait', 'succeeded', 'failed', 'cancelled');

-- ---------------------------------------------------------------------------------------------
-- Sequences
-- ---------------------------------------------------------------------------------------------

-- The one sequence every task event takes its seq from: monotonic, not dense (per-task ordering
-- is all the timeline needs). A seq taken before another may commit after it: the timeline
-- re-reads a short late-commit window for that (blueprints/streams/timeline_hub.py).
CREATE SEQUENCE deploy_task_event_seq;

-- ---------------------------------------------------------------------------------------------
-- deploy_tasks: one row per task (a deployment someone asked for), the only source of truth
-- about it (seed 000).
--
-- Written by: the create (engine/lifecycle/actions.py, task_insert), the one guarded status write
-- (engine/core/transitions.py, task_transition: status, phase, lease, failure, finished_at), the
-- runner through its fenced handle (task_*_if_held: checkpoints, artifacts, devbox), the lease
-- renewer (task_renew_leases_if_held), cancel requests, canvas moves, the reaper (through
-- task_transition), and the cleanup worker's retention purge (which deletes rows).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE deploy_tasks (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The tenant: every query is scoped by it (another tenant's task is a 404).
    workspace            text NOT NULL,
    project_id           text NOT NULL,
    created_by           text NOT NULL,
    -- What was asked for (template, image, database, github, prompt) and which runner runs it.
    source_kind          text NOT NULL,
    runner               text NOT NULL,
    status               task_status NOT NULL DEFAULT 'queued',
    -- A phase is not a status (ADR 0023): verify is a phase of applying.
    phase                text,
    -- The request, secrets stripped before insert; the stripped key names are sensitive_keys.
    source               jsonb NOT NULL,
    sensitive_keys       text[] NOT NULL DEFAULT '{}',
    -- resultIdentities, the deployment plan, applied resources.
    artifact_summary     jsonb NOT NULL DEFAULT '{}',
    failure_reason       text,
    failure_message      text,
    -- Set by a cancel request; the runner acknowledges it by moving the task to cancelled. Pages
    -- show "Cancelling..." from it, so every viewer sees the same.
    cancel_requested_at  timestamptz,
    -- The lease: the only right to run the task. No heartbeat column: expiry is the liveness fact.
    lease_owner          text,
    lease_expires_at     timestamptz,
    -- +1 on every claim; every runner write is fenced on it, so a zombie's writes update nothing.
    lease_epoch          bigint NOT NULL DEFAULT 0,
    -- Anchor of the maximum active-run duration, reset on every claim.
    lease_claimed_at     timestamptz,
    -- The task this one redeploys. No foreign key: predecessors are purgeable.
    retried_from_task_id uuid,
    devbox_id            text,
    devbox_paused_at     timestamptz,
    -- Where the task sits on the project's canvas (the page's projection).
    canvas               jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    -- The status the last transition moved the task from (written by task_transition only).
    previous_status      task_status,
    -- The completed task this one rolls back to (a rollback, engine/lifecycle/rollback.py). No
    -- foreign key, like retried_from_task_id.
    rolled_back_from_task_id uuid,
    -- The app the task belongs to: the identity its deployments converge on (a template's instance
    -- name, an image's or a database's object name), NULL until known (a fresh template run
    -- allocates its instance name) and for sources with no identity (github, prompt). Derived
    -- here, once, whenever the row's source or recorded identities change.
    app_key              text GENERATED ALWAYS AS (
        CASE source_kind
            WHEN 'template' THEN 'template:' || (artifact_summary -> 'resultIdentities' ->> 'templateInstanceName')
            WHEN 'image' THEN 'image:' || (source ->> 'name')
            WHEN 'database' THEN 'database:' || (source ->> 'name')
        END) STORED
) WITH (
    -- Lease renewal rewrites lease_expires_at of every held lease each tick. That column has no
    -- index, and 30% free space per page lets the new row versions stay on their page: the
    -- updates are HOT (no index writes). One tick over 10,000 leases went from 62,578 WAL records
    -- and ~250 ms to 10,821 records and ~40 ms (BENCHMARKS.md); 80 still sent most off-page.
    fillfactor = 70,
    -- Purges churn: vacuum after ~1% of rows changed instead of 20%, so the purged rows' dead
    -- entries at the head of deploy_tasks_terminal_by_finish never pile up for every sweep.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000
);

-- Reaper scans, one partial index each, so a sweep reads only the rows it may act on.
-- task_list_ids_run_overdue (the maximum run time) and task_list_ids_lease_expired (which walks the
-- leased rows here rather than indexing lease_expires_at, see fillfactor above).
CREATE INDEX deploy_tasks_leased_by_claim
    ON deploy_tasks (lease_claimed_at) WHERE status IN ('running', 'applying');
-- task_list_ids_cancel_overdue: cancels not acknowledged in time, in any active status.
CREATE INDEX deploy_tasks_pending_cancel
    ON deploy_tasks (cancel_requested_at)
    WHERE status IN ('queued', 'running', 'blocked', 'applying') AND cancel_requested_at IS NOT NULL;
-- task_list_ids_queued_overdue: tasks nobody claimed in time.
CREATE INDEX deploy_tasks_queued_by_age
    ON deploy_tasks (created_at) WHERE status = 'queued';
-- cleanup_job_enqueue_purges: finished tasks past retention (task_expired below), oldest first.
CREATE INDEX deploy_tasks_terminal_by_finish
    ON deploy_tasks (finished_at) WHERE status IN ('completed', 'failed', 'cancelled');
-- cleanup_job_enqueue_devbox_pauses: finished tasks whose devbox still runs.
CREATE INDEX deploy_tasks_unpaused_devbox
    ON deploy_tasks (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled')
      AND devbox_id IS NOT NULL AND devbox_paused_at IS NULL;
-- task_list_ids_active_with_devbox (and the devbox-pause sweep's NOT EXISTS): a devbox delete or
-- pause re-checks that no active task still uses the devbox.
CREATE INDEX deploy_tasks_active_by_devbox
    ON deploy_tasks (devbox_id)
    WHERE devbox_id IS NOT NULL AND status IN ('queued', 'running', 'blocked', 'applying');
-- Reads: a project's tasks newest first (the board, task_list_project_board) in the cursor order
-- (created_at, id) of the list endpoint.
CREATE INDEX deploy_tasks_by_project
    ON deploy_tasks (workspace, project_id, created_at DESC, id DESC);
-- task_list_page and task_list_for_operator: a tenant's tasks newest first, cursor-paginated.
CREATE INDEX deploy_tasks_by_workspace
    ON deploy_tasks (workspace, created_at DESC, id DESC);
-- At most one active clone per predecessor: the loser of a redeploy race loses the insert itself
-- (task_insert inserts nothing; engine/lifecycle/actions.py answers RedeployAlreadyActive).
CREATE UNIQUE INDEX deploy_tasks_one_active_clone
    ON deploy_tasks (workspace, retried_from_task_id)
    WHERE retried_from_task_id IS NOT NULL AND status IN ('queued', 'running', 'blocked', 'applying');
-- An app's history newest first (task_list_app_page) and each app's newest task
-- (task_list_apps_of_project), both in the (created_at, id) cursor order.
CREATE INDEX deploy_tasks_by_app
    ON deploy_tasks (workspace, project_id, app_key, created_at DESC, id DESC)
    WHERE app_key IS NOT NULL;
-- At most one active rollback per app: the loser of a rollback race loses the insert itself
-- (task_insert inserts nothing; engine/lifecycle/rollback.py answers AppDeployAlreadyActive).
CREATE UNIQUE INDEX deploy_tasks_one_active_rollback
    ON deploy_tasks (workspace, project_id, app_key)
    WHERE rolled_back_from_task_id IS NOT NULL
      AND status IN ('queued', 'running', 'blocked', 'applying');
-- task_get_successor and the board's "has it been redeployed?": every clone, active or not. The
-- board keeps every failed task that was not redeployed, however old, so this must not scan.
CREATE INDEX deploy_tasks_by_predecessor
    ON deploy_tasks (workspace, retried_from_task_id)
    WHERE retried_from_task_id IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- deploy_task_events: one row per thing that happened to a task (a transition, a step, a gateway
-- batch, a cleanup), append-only; the timeline is built from them. Deleted with the task.
--
-- Written by: task_transition (the event naming each verdict, in the same statement as the
-- status), the runner's fenced handle (emit_event, steps), the cleanup worker (audit events).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE deploy_task_events (
    seq        bigint PRIMARY KEY DEFAULT nextval('deploy_task_event_seq'),
    task_id    uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    kind       text NOT NULL,
    -- Scrubbed: never a submitted secret.
    payload    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The write that made the event (migrations/0009): "<write id>.<n>" for a runner's write, the
    -- move id for a status move; NULL where no retry can repeat the insert. A statement sent
    -- again after a lost connection (engine/db.py) inserts nothing twice and finds its own move.
    key        text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000);

-- event_list_for_task / event_list_tail_for_task: a task's timeline in order, from a seq on.
CREATE INDEX deploy_task_events_by_task ON deploy_task_events (task_id, seq);
-- task_write_if_held's ON CONFLICT DO NOTHING; task_list_moved_by_key.
CREATE UNIQUE INDEX deploy_task_events_by_key
    ON deploy_task_events (task_id, key) WHERE key IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- deploy_task_messages: one row per chat turn of a task. Deleted with the task. No code writes it
-- yet: it is kept for the chat history of the AI runner.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE deploy_task_messages (
    id         bigserial PRIMARY KEY,
    task_id    uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    role       text NOT NULL,
    content    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A task's turns in order.
CREATE INDEX deploy_task_messages_by_task ON deploy_task_messages (task_id, id);

-- ---------------------------------------------------------------------------------------------
-- task_runtimes: one row per runtime a task started (a local process group, a devbox), kept until
-- a stop of it is confirmed (seed 001). No foreign key to deploy_tasks: the handle must outlive
-- the task row it was taken from.
--
-- Written by: the runner's fenced handle when it starts one (runtime_insert_local_if_held, and
-- task_set_devbox_if_held for a devbox), the cleanup worker and startup reconciliation
-- (engine/cleanup/task_runtimes.py: release, stop_failed, delete).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE task_runtimes (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id           uuid NOT NULL,
    workspace         text NOT NULL,
    kind              runtime_kind NOT NULL,
    -- How liveness can be judged: 'process' (pid + start time on `host`), 'remote' (devbox),
    -- 'none' (no handle). Only 'process' rows can ever be confirmed dead.
    liveness          text NOT NULL CHECK (liveness IN ('process', 'remote', 'none')),
    -- 'running': tracked; 'stop_failed': a stop could not be confirmed (retryable);
    -- 'stopped': confirmed dead but kept for what it can resume (no process handle left).
    status            text NOT NULL DEFAULT 'running'
                      CHECK (status IN ('running', 'stop_failed', 'stopped')),
    label             text,
    -- The host and engine runtime that started it (startup reconciliation is per host).
    host              text NOT NULL,
    owner             text NOT NULL,
    owner_pid         integer,
    owner_start_ticks bigint,
    -- Local handles: the group leader, its group and its start time (clock ticks since boot).
    boot_id           text,
    pid               integer,
    pgid              integer,
    start_ticks       bigint,
    -- Remote handle: the devbox id.
    remote_id         text,
    resume            jsonb,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- A task's runtimes: captured into a purge's snapshot, stopped by its cleanup.
CREATE INDEX task_runtimes_by_task ON task_runtimes (task_id);
-- runtime_list_reconcilable_on_host / runtime_list_local_of_owner: what a host (or one engine
-- runtime on it) still has to stop.
CREATE INDEX task_runtimes_by_host ON task_runtimes (host, owner)
    WHERE status <> 'stopped';
-- One row per devbox, however many tasks used it: the ON CONFLICT target of
-- task_set_devbox_if_held; runtime_delete_devbox finds it by id.
CREATE UNIQUE INDEX task_runtimes_one_per_devbox
    ON task_runtimes (remote_id) WHERE kind = 'devbox';

-- ---------------------------------------------------------------------------------------------
-- cleanup_jobs: one row per durable cleanup intent (pause or delete a devbox, stop a runtime,
-- purge a task past retention), retried with backoff until it succeeds or fails for good
-- (seed 001). No foreign key to deploy_tasks: the intent must outlive the task.
--
-- Written by: whoever triggers a cleanup (engine/cleanup/jobs.py: cleanup_job_enqueue, the
-- reaper's sweeps cleanup_job_enqueue_purges / _devbox_pauses), the cleanup worker
-- (engine/maintenance/cleanup_worker.py: claim, finish, retry, fail) and operators (retry a
-- failed job).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE cleanup_jobs (
    id              bigserial PRIMARY KEY,
    -- What the job does, as a stable key: a repeated trigger finds the open job of the same key.
    operation_id    text NOT NULL,
    trigger         cleanup_trigger NOT NULL,
    state           cleanup_job_state NOT NULL DEFAULT 'pending',
    task_id         uuid,
    workspace       text,
    -- Every handle the job needs, captured before the task is touched.
    snapshot        jsonb NOT NULL,
    -- Only a worker on this host may run it (a local process group), NULL: any worker.
    host            text,
    -- Only a worker with a devbox integration may run it.
    needs_devbox    boolean NOT NULL DEFAULT false,
    -- Claims made so far (at most 8). While running, next_attempt_at is the attempt's deadline:
    -- past it the claim is considered abandoned and the job is due again.
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    claimed_by      text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05
);

-- One non-terminal job per operation: a repeated trigger reuses it (cleanup_job_enqueue).
CREATE UNIQUE INDEX cleanup_jobs_one_open_per_operation
    ON cleanup_jobs (operation_id) WHERE state IN ('pending', 'running', 'retry_wait');
-- Failed jobs stay for diagnosis and a sweep never re-mints them (the enqueue sweeps' NOT EXISTS,
-- cleanup_job_retry_if_failed). New jobs never touch this index.
CREATE INDEX cleanup_jobs_failed_by_operation
    ON cleanup_jobs (operation_id) WHERE state = 'failed';
-- cleanup_job_claim_due: the due jobs of a trigger, oldest deadline first.
CREATE INDEX cleanup_jobs_due
    ON cleanup_jobs (trigger, next_attempt_at) WHERE state IN ('pending', 'running', 'retry_wait');
-- cleanup_job_delete_completed: housekeeping of finished jobs, oldest first.
CREATE INDEX cleanup_jobs_completed
    ON cleanup_jobs (completed_at) WHERE state IN ('succeeded', 'cancelled');

-- ---------------------------------------------------------------------------------------------
-- failure_streaks: one row per failing subject, the recurring shape of work ('reaper',
-- 'lease_renewal', 'listener', 'cleanup:devbox_pause', 'integration:gateway', ...), never one run
-- (seed 002). Upserted on every failure, deleted on the first success: the table is the list of
-- what is broken right now, and survives restarts so the count stays exact.
--
-- Written by: engine/operations/streaks.py (streak_record_failure, streak_delete).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE failure_streaks (
    subject              text PRIMARY KEY,
    consecutive_failures bigint NOT NULL,
    first_failure_at     timestamptz NOT NULL,
    last_failure_at      timestamptz NOT NULL,
    -- Scrubbed of known credentials and cut to a bounded length before it is written.
    last_error           text NOT NULL,
    -- The engine runtime that recorded the last failure (host:pid:nonce).
    last_owner           text NOT NULL
);

-- ---------------------------------------------------------------------------------------------
-- idempotency_keys: one row per idempotency key of a creating request (the Idempotency-Key
-- header, the chat tools' idempotencyKey). A key is the caller's: (workspace, created_by, key).
-- `fingerprint` is a keyed hash (HMAC) of the request, so no submitted value is stored.
-- response_status NULL: the first request is still in flight. The stored response is what the
-- API answered (secrets already stripped).
--
-- Written by: engine/lifecycle/idempotency.py (claim, record, release), in the create's
-- transaction; purged after 24 h by the cleanup worker's housekeeping
-- (engine/maintenance/purges.py).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE idempotency_keys (
    workspace       text NOT NULL,
    created_by      text NOT NULL,
    key             text NOT NULL,
    fingerprint     text NOT NULL,
    response_status integer,
    response_body   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, created_by, key)
);

-- idempotency_key_delete_expired: the housekeeping purge, oldest first.
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- ---------------------------------------------------------------------------------------------
-- projects: one row per project a user started from the landing page before deploying anything
-- into it. Projects with tasks need no row: the landing page lists both in one read
-- (project_list). A row references no task and holds no user input beyond the id, so retention's
-- purge never touches it (a project whose tasks were all purged stays listed, empty).
--
-- Written by: project_start (the landing page's "new project").
-- ---------------------------------------------------------------------------------------------
CREATE TABLE projects (
    workspace  text NOT NULL,
    project_id text NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, project_id)
);

-- ---------------------------------------------------------------------------------------------
-- dock_dismissals: one row per user and finished task they dismissed from a project's dock, kept
-- on the server so a dismissal lasts on every browser, however many there are. project_id is
-- the task's own, copied so the dock reads a project's dismissals by the primary key. Deleted
-- with its task (retention's purge cascades here).
--
-- Written by: dock_dismissal_insert_if_finished (engine/lifecycle/dismissals.py).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE dock_dismissals (
    workspace    text NOT NULL,
    user_id      text NOT NULL,
    project_id   text NOT NULL,
    task_id      uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    dismissed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, user_id, project_id, task_id)
);

-- The cascade finds a purged task's rows by this index, not by a scan per deleted task.
CREATE INDEX dock_dismissals_task_id ON dock_dismissals (task_id);

-- ---------------------------------------------------------------------------------------------
-- session_revocations: browser sign-ins ended on the server (POST /logout), by the random session
-- id a session cookie carries (`sid`). Every request of a signed-in browser session looks its id
-- up here, so a sign-out on any process of any host ends the session everywhere, a copied cookie
-- included. Kept until the session would have ended anyway; purged by a later sign-out.
--
-- Written by: engine/lifecycle/sessions.py (engine/sql/session_revocations.sql).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE session_revocations (
    session_id  text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);

-- The purge of expired revocations.
CREATE INDEX session_revocations_by_expiry ON session_revocations (expires_at);

-- ---------------------------------------------------------------------------------------------
-- mcp_sessions: one row per MCP session of the protocol's handshake revisions (2024-11-05 ..
-- 2025-11-25), one per `initialize`: the caller, the revision agreed, the last request. Ended by
-- the client's DELETE, or by MCP_SESSION_IDLE_S without a request (each initialize purges a batch
-- of idle ones). The stateless revision (2026-07-28) keeps nothing here.
--
-- Written by: engine/lifecycle/sessions.py (engine/sql/mcp_sessions.sql).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE mcp_sessions (
    session_id text PRIMARY KEY,
    workspace  text NOT NULL,
    user_id    text NOT NULL,
    -- The protocol revision its `initialize` agreed.
    version    text NOT NULL,
    last_seen  timestamptz NOT NULL DEFAULT now()
);

-- The purge of idle sessions.
CREATE INDEX mcp_sessions_by_last_seen ON mcp_sessions (last_seen);

-- ---------------------------------------------------------------------------------------------
-- schema_migrations: the ledger, one row per migration a database has (migrations/NNNN_name.sql).
-- Created and written only by engine/operations/migrations.py (schema_migrations_create /
-- _record), before the first migration runs.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    -- true: recorded for a database whose schema predates the ledger, not run.
    adopted    boolean NOT NULL DEFAULT false,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Functions: two rules the named queries share, written once.
-- ---------------------------------------------------------------------------------------------

-- The task-change NOTIFY on the one channel `deploy_tasks`, one notification per call: ids only,
-- never content (engine/maintenance/listener.py parses it; viewers re-read the row).
-- - removed: a retention purge, itself the removal event (nothing is left to re-read).
-- - status/epoch/owner/cancel: the lease facts the writing statement already holds, so the
--   process running the task decides from the payload whether its runner must stop.
-- - runner: a process's batched announcement of its runners' own writes (tasks_notify_runner,
--   engine/core/notices.py): viewers re-read; the running process has nothing to act on.
-- Called by task_transition and the other writes viewers must see.
CREATE FUNCTION notify_task_changed(workspace text, project_id text, task_id uuid,
                                    removed boolean DEFAULT false,
                                    status task_status DEFAULT NULL,
                                    epoch bigint DEFAULT NULL,
                                    owner text DEFAULT NULL,
                                    cancel boolean DEFAULT NULL,
                                    runner boolean DEFAULT false)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('deploy_tasks', (
        jsonb_build_object('workspace', workspace, 'project', project_id, 'task', task_id)
        || CASE WHEN removed THEN '{"removed": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN runner THEN '{"runner": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN status IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('lease', jsonb_build_object(
                    'status', status, 'epoch', epoch, 'owner', owner, 'cancel', cancel)) END
    )::text)
$$;

-- Finished and past retention ("expired"). One expression, STABLE: the planner inlines it, so
-- `finished_at < cutoff` still bounds the index scans (deploy_tasks_terminal_by_finish) of the
-- purge statements that call it.
CREATE FUNCTION task_expired(status task_status, finished_at timestamptz, cutoff timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT status IN ('completed', 'failed', 'cancelled') AND finished_at < cutoff
$$;

-- No triggers: every write that must notify says so in its own statement.
