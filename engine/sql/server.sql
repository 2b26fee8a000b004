-- Statements about the server and the notification channel themselves (no table).

-- notify_probe --
-- A probe notification: the listener that receives it measures the delivery lag.
SELECT pg_notify('deploy_tasks', json_build_object('probe', %(probe)s::text)::text);

-- server_ping --
-- Whether the database answers (readiness).
SELECT 1 AS ok;
