-- Idempotency keys of creating requests (Idempotency-Key header, the chat tools' idempotencyKey).
-- A key is the caller's: (namespace, created_by, key). `fingerprint` is a keyed hash (HMAC) of
-- the request (method, path, canonical body), so no submitted value, secret or not, is stored.
-- response_status NULL: the first request is still in flight. The stored response is what the
-- API answered (snapshots and error bodies, secrets already stripped). Purged after 24 h by the
-- cleanup worker's housekeeping.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    namespace       text NOT NULL,
    created_by      text NOT NULL,
    key             text NOT NULL,
    fingerprint     text NOT NULL,
    response_status integer,
    response_body   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, created_by, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (created_at);
