-- Queries on session_revocations: browser sessions signed out before their lifetime ended.

-- session_revocation_exists --
-- Whether a browser session was signed out (one primary-key probe per signed-in page request).
SELECT EXISTS (SELECT 1 FROM session_revocations WHERE session_id = %(session_id)s) AS revoked;

-- session_revocation_insert --
-- Sign a session out everywhere until it would have expired, and purge a batch of revocations
-- whose sessions have expired by now (sign-outs are rare: this keeps the table small).
WITH purged AS (
    DELETE FROM session_revocations WHERE session_id IN (
        SELECT session_id FROM session_revocations
        WHERE expires_at < coalesce(%(now)s, now())
        LIMIT %(purge_limit)s)
)
INSERT INTO session_revocations (session_id, expires_at)
VALUES (%(session_id)s, %(expires_at)s)
ON CONFLICT (session_id) DO NOTHING;
