-- Seed 002: one row per failing subject (the recurring shape of work, never one run), upserted
-- on every failure and deleted on the first success. A non-empty table is the list of what is
-- broken right now; it survives restarts so the count stays exact.
CREATE TABLE IF NOT EXISTS failure_streaks (
    -- e.g. 'reaper', 'lease_renewal', 'listener', 'retention_purge', 'cleanup:devbox_pause',
    -- 'integration:devbox', 'integration:gateway', 'integration:cluster:<namespace>'.
    subject              text PRIMARY KEY,
    consecutive_failures bigint NOT NULL,
    first_failure_at     timestamptz NOT NULL,
    last_failure_at      timestamptz NOT NULL,
    -- Scrubbed of known credentials and cut to a bounded length before it is written.
    last_error           text NOT NULL,
    -- The engine runtime that recorded the last failure (host:pid:nonce).
    last_owner           text NOT NULL
);
