-- Queries on idempotency_keys. A key older than %(ttl_s)s seconds counts as absent.

-- idempotency_key_claim --
-- Take a key for a first request (in flight, no response yet). No row back: it is taken.
INSERT INTO idempotency_keys (workspace, created_by, key, fingerprint, created_at)
VALUES (%(workspace)s, %(user)s, %(key)s, %(fingerprint)s, coalesce(%(now)s, now()))
ON CONFLICT DO NOTHING
RETURNING key;

-- idempotency_key_delete_expired --
-- Purge a batch of expired keys (the cleanup worker's housekeeping).
DELETE FROM idempotency_keys WHERE ctid IN (
    SELECT ctid FROM idempotency_keys
    WHERE created_at < coalesce(%(now)s, now()) - make_interval(secs => %(ttl_s)s)
    LIMIT %(limit)s);

-- idempotency_key_delete_if_expired --
-- Forget one key that has expired, or whose first request never answered (its process died
-- mid-request), so it can be taken again.
DELETE FROM idempotency_keys
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s
  AND (created_at < coalesce(%(now)s, now()) - make_interval(secs => %(ttl_s)s)
       OR (response_status IS NULL
           AND created_at < coalesce(%(now)s, now()) - make_interval(secs => %(abandoned_s)s)));

-- idempotency_key_get --
-- A caller's key: its fingerprint and, once the first request finished, its response.
SELECT fingerprint, response_status, response_body FROM idempotency_keys
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s;

-- idempotency_key_record --
-- Keep the first request's response for replay.
UPDATE idempotency_keys SET response_status = %(status)s, response_body = %(body)s
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s
  AND response_status IS NULL;

-- idempotency_key_release --
-- The first request failed without an answer worth replaying: free the key for a retry.
DELETE FROM idempotency_keys
WHERE workspace = %(workspace)s AND created_by = %(user)s AND key = %(key)s
  AND response_status IS NULL;
