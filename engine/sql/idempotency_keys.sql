-- Queries on idempotency_keys. A key older than %(ttl_s)s seconds counts as absent.

-- idempotency_key_claim --
-- Take a key for a first request, inside the transaction that runs it and keeps its answer
-- (engine/lifecycle/idempotency.py): the row stays locked until that transaction ends, so a
-- request with the same key meanwhile waits here, at most %(wait_ms)s ms (lock_timeout), then
-- finds the kept answer, or takes the key itself if the first one rolled back or its process
-- died. A key older than %(ttl_s)s seconds, or one an older release left without an answer, is
-- taken over. A stalled holder cannot keep it: idle_in_transaction_session_timeout. No row
-- back: the key is taken (and now locked by this transaction until it ends).
INSERT INTO idempotency_keys AS k (workspace, created_by, key, fingerprint, created_at)
SELECT %(workspace)s, %(user)s, %(key)s, %(fingerprint)s, coalesce(%(now)s, now())
FROM (SELECT set_config('lock_timeout', %(wait_ms)s::text, true),
             set_config('idle_in_transaction_session_timeout', %(idle_ms)s::text, true)) AS bounds
ON CONFLICT (workspace, created_by, key) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
    response_status = NULL, response_body = NULL
WHERE k.response_status IS NULL
   OR k.created_at < EXCLUDED.created_at - make_interval(secs => %(ttl_s)s)
RETURNING key;

-- idempotency_key_delete_expired --
-- Purge a batch of expired keys (the cleanup worker's housekeeping).
DELETE FROM idempotency_keys WHERE ctid IN (
    SELECT ctid FROM idempotency_keys
    WHERE created_at < coalesce(%(now)s, now()) - make_interval(secs => %(ttl_s)s)
    LIMIT %(limit)s);

-- idempotency_key_get --
-- A caller's key: its fingerprint and, once the first request finished, its response.
SELECT fingerprint, response_status, response_body FROM idempotency_keys
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s;

-- idempotency_key_record --
-- Keep the first request's response for replay.
UPDATE idempotency_keys SET response_status = %(status)s, response_body = %(body)s
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s
  AND response_status IS NULL;
