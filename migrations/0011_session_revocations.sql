-- Browser sign-ins ended on the server (POST /logout). A session cookie carries a random session
-- id (`sid`); every request of a signed-in browser session looks it up here, so a sign-out made
-- on any process of any host ends the session everywhere, a copied cookie included. A row is
-- kept until the session would have ended anyway (its sign-in time plus SESSION_LIFETIME_S) and
-- purged by a later sign-out. No user data: the id is random and names nobody.
CREATE TABLE IF NOT EXISTS session_revocations (
    session_id  text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS session_revocations_by_expiry ON session_revocations (expires_at);
