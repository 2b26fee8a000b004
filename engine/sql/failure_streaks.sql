-- Queries on failure_streaks: one row per failing subject (seed 002). Times take
-- coalesce(%(now)s, now()) so tests can pin the clock.

-- streak_delete --
-- The subject succeeded: end its streak; the streak that ended, if there was one.
DELETE FROM failure_streaks WHERE subject = %(subject)s
RETURNING consecutive_failures, first_failure_at, last_failure_at;

-- streak_delete_if_stale --
-- A success in a process that saw no failure ends a streak nobody has refreshed for a while
-- (left by a process that is gone, or by one that has recovered since).
DELETE FROM failure_streaks
WHERE subject = %(subject)s
  AND last_failure_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(stale_s)s::float8)
RETURNING consecutive_failures, first_failure_at, last_failure_at;

-- streak_list --
-- Every current streak, the longest-running first.
SELECT *, coalesce(%(now)s::timestamptz, now()) - first_failure_at AS age
FROM failure_streaks ORDER BY first_failure_at, subject;

-- streak_record_failure --
-- One more failure of a subject: start its streak or extend it; the row and the streak's age.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
INSERT INTO failure_streaks AS s (subject, consecutive_failures, first_failure_at,
                                  last_failure_at, last_error, last_owner)
SELECT %(subject)s, 1, clock.now, clock.now, %(error)s, %(owner)s FROM clock
ON CONFLICT (subject) DO UPDATE SET
    consecutive_failures = s.consecutive_failures + 1,
    last_failure_at = excluded.last_failure_at,
    last_error = excluded.last_error,
    last_owner = excluded.last_owner
RETURNING s.*, extract(epoch FROM s.last_failure_at - s.first_failure_at)::float8 AS age_s;
