-- The whole schema, applied at every boot (pre-launch: breaking changes allowed). Every statement
-- is idempotent so several processes may boot at once; boot serializes them with an advisory lock.

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

-- Reaper scans, one partial index each.
CREATE INDEX IF NOT EXISTS deploy_tasks_leased_by_expiry
    ON deploy_tasks (lease_expires_at) WHERE status IN ('running', 'applying');
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
