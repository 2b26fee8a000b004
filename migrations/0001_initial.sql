-- The schema as of the first release. Applied once, in one transaction, by engine/migrations.py;
-- later changes are migrations of their own (NNNN_name.sql), never edits to this file. The
-- IF NOT EXISTS guards date from when this file ran at every boot; a database created then is
-- adopted as version 1 without running it again.

DO $$ BEGIN
    CREATE TYPE task_status AS ENUM (
        'queued', 'running', 'blocked', 'applying', 'completed', 'failed', 'cancelled');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- Monotonic, not dense: per-task ordering is all the timeline needs.
CREATE SEQUENCE IF NOT EXISTS deploy_task_event_seq;

CREATE TABLE IF NOT EXISTS deploy_tasks (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    namespace            text NOT NULL,
    project_id           text NOT NULL,
    created_by           text NOT NULL,
    source_kind          text NOT NULL,
    runner               text NOT NULL,
    status               task_status NOT NULL DEFAULT 'queued',
    -- A phase is not a status (ADR 0023): verify is a phase of applying.
    phase                text,
    -- Secrets stripped before insert; stripped key names live in sensitive_keys.
    source               jsonb NOT NULL,
    sensitive_keys       text[] NOT NULL DEFAULT '{}',
    -- resultIdentities, the deployment plan, applied resources.
    artifact_summary     jsonb NOT NULL DEFAULT '{}',
    failure_reason       text,
    failure_message      text,
    cancel_requested_at  timestamptz,
    lease_owner          text,
    lease_expires_at     timestamptz,
    lease_epoch          bigint NOT NULL DEFAULT 0,
    -- Anchor of the maximum active-run duration, reset on every claim.
    lease_claimed_at     timestamptz,
    -- No foreign key: predecessors are purgeable.
    retried_from_task_id uuid,
    devbox_id            text,
    devbox_paused_at     timestamptz,
    canvas               jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz
);

-- Lease renewal rewrites lease_expires_at of every held lease each tick. Leaving that column
-- unindexed and free space on each page makes those updates HOT (no index writes): one tick over
-- 10,000 leases went from 62,578 WAL records and ~250 ms to 10,821 records and ~40 ms of server
-- time (BENCHMARKS.md). 70 keeps a page's rows and their next versions on the page; 80 still sent
-- most new versions off-page. The reaper's expired-lease scan walks the leased rows through
-- deploy_tasks_leased_by_claim instead (a few ms for 20,000 leased rows).
-- previous_status: the status the last transition moved the task from (task_transition only).
ALTER TABLE deploy_tasks ADD COLUMN IF NOT EXISTS previous_status task_status;

ALTER TABLE deploy_tasks SET (fillfactor = 70);
DROP INDEX IF EXISTS deploy_tasks_leased_by_expiry;

-- Reaper scans, one partial index each (the expired-lease scan shares leased_by_claim).
CREATE INDEX IF NOT EXISTS deploy_tasks_leased_by_claim
    ON deploy_tasks (lease_claimed_at) WHERE status IN ('running', 'applying');
CREATE INDEX IF NOT EXISTS deploy_tasks_pending_cancel
    ON deploy_tasks (cancel_requested_at)
    WHERE status IN ('running', 'applying') AND cancel_requested_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS deploy_tasks_queued_by_age
    ON deploy_tasks (created_at) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS deploy_tasks_terminal_by_finish
    ON deploy_tasks (finished_at) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS deploy_tasks_unpaused_devbox
    ON deploy_tasks (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled')
      AND devbox_id IS NOT NULL AND devbox_paused_at IS NULL;
-- Reads: a project's tasks newest first, the cursor order of the list endpoint.
CREATE INDEX IF NOT EXISTS deploy_tasks_by_project
    ON deploy_tasks (namespace, project_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS deploy_tasks_by_namespace
    ON deploy_tasks (namespace, created_at DESC, id DESC);
-- At most one active clone per predecessor: the loser of a redeploy race loses the insert itself.
CREATE UNIQUE INDEX IF NOT EXISTS deploy_tasks_one_active_clone
    ON deploy_tasks (namespace, retried_from_task_id)
    WHERE retried_from_task_id IS NOT NULL AND status IN ('queued', 'running', 'blocked', 'applying');

CREATE TABLE IF NOT EXISTS deploy_task_events (
    seq        bigint PRIMARY KEY DEFAULT nextval('deploy_task_event_seq'),
    task_id    uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    kind       text NOT NULL,
    payload    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS deploy_task_events_by_task ON deploy_task_events (task_id, seq);

CREATE TABLE IF NOT EXISTS deploy_task_messages (
    id         bigserial PRIMARY KEY,
    task_id    uuid NOT NULL REFERENCES deploy_tasks (id) ON DELETE CASCADE,
    role       text NOT NULL,
    content    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS deploy_task_messages_by_task ON deploy_task_messages (task_id, id);

-- Seed 001: what tasks leave behind. Neither table has a foreign key to deploy_tasks: a runtime
-- handle and a cleanup intent must both outlive the task row they were taken from.

DO $$ BEGIN
    CREATE TYPE runtime_kind AS ENUM ('local', 'devbox');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

DO $$ BEGIN
    CREATE TYPE cleanup_trigger AS ENUM (
        'devbox_pause', 'devbox_delete', 'runtime_stop', 'retention_purge');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

DO $$ BEGIN
    CREATE TYPE cleanup_job_state AS ENUM (
        'pending', 'running', 'retry_wait', 'succeeded', 'failed', 'cancelled');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- One row per runtime a task started, kept until a stop of it is confirmed.
CREATE TABLE IF NOT EXISTS task_runtimes (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id           uuid NOT NULL,
    namespace         text NOT NULL,
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
CREATE INDEX IF NOT EXISTS task_runtimes_by_task ON task_runtimes (task_id);
CREATE INDEX IF NOT EXISTS task_runtimes_by_host ON task_runtimes (host, owner)
    WHERE status <> 'stopped';
CREATE UNIQUE INDEX IF NOT EXISTS task_runtimes_one_per_devbox
    ON task_runtimes (remote_id) WHERE kind = 'devbox';

-- Durable cleanup intents. `snapshot` holds every handle, captured before the task is touched.
CREATE TABLE IF NOT EXISTS cleanup_jobs (
    id              bigserial PRIMARY KEY,
    operation_id    text NOT NULL,
    trigger         cleanup_trigger NOT NULL,
    state           cleanup_job_state NOT NULL DEFAULT 'pending',
    task_id         uuid,
    namespace       text,
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
);
-- One non-terminal job per operation: a repeated trigger reuses it.
CREATE UNIQUE INDEX IF NOT EXISTS cleanup_jobs_one_open_per_operation
    ON cleanup_jobs (operation_id) WHERE state IN ('pending', 'running', 'retry_wait');
-- Failed jobs stay for diagnosis and are never re-minted by a sweep; new jobs never touch this.
CREATE INDEX IF NOT EXISTS cleanup_jobs_failed_by_operation
    ON cleanup_jobs (operation_id) WHERE state = 'failed';
CREATE INDEX IF NOT EXISTS cleanup_jobs_due
    ON cleanup_jobs (trigger, next_attempt_at) WHERE state IN ('pending', 'running', 'retry_wait');
CREATE INDEX IF NOT EXISTS cleanup_jobs_completed
    ON cleanup_jobs (completed_at) WHERE state IN ('succeeded', 'cancelled');
-- Purges and cleanup jobs churn: vacuum after ~1% of rows changed instead of the default 20%, so
-- the purged rows' dead index entries at the head of deploy_tasks_terminal_by_finish (and of
-- cleanup_jobs_due) never pile up to a fifth of the table for every sweep to walk through.
ALTER TABLE deploy_tasks SET (autovacuum_vacuum_scale_factor = 0.01,
                              autovacuum_vacuum_threshold = 1000);
ALTER TABLE deploy_task_events SET (autovacuum_vacuum_scale_factor = 0.01,
                                    autovacuum_vacuum_threshold = 10000);
ALTER TABLE cleanup_jobs SET (autovacuum_vacuum_scale_factor = 0.01,
                              autovacuum_vacuum_threshold = 1000,
                              autovacuum_analyze_scale_factor = 0.05);
-- A devbox delete re-checks that no active task still references the devbox.
CREATE INDEX IF NOT EXISTS deploy_tasks_active_by_devbox
    ON deploy_tasks (devbox_id)
    WHERE devbox_id IS NOT NULL AND status IN ('queued', 'running', 'blocked', 'applying');
