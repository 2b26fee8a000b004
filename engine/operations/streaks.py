"""Failure streaks (seed 002): durable evidence of what keeps failing, plus throttled log lines.

Every loop that can fail over and over (reaper sweeps, lease renewal ticks, the listener, cleanup
attempts, the retention purge, integration calls) reports each outcome here under a *subject*:
the recurring shape of the work, never one run (`reaper`, `cleanup:devbox_pause`,
`integration:cluster:<workspace>`).

- Durable: `failure_streaks` holds one row per failing subject, upserted on every failure with the
  exact consecutive count, first and last failure time and the last error (scrubbed), and deleted
  on the first success. A non-empty table is the list of what is broken right now.
- Log lines: the first failure and then every 60th are logged (WARNING); once a streak is 15
  minutes old its lines are ERROR, and the moment it crosses that age is always logged, whatever
  the throttle says. The first success after a streak logs one INFO line carrying
  `afterConsecutiveFailures`. The throttle bounds lines only; the durable count stays exact.

The in-memory counter is the throttle authority, so a store that is itself failing (the database
is down) cannot starve the reporting; the durable count is what the lines quote when available.
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from engine.db import Database
from engine.trust import secrets

log = logging.getLogger("engine.operations.streaks")

#: Log the first failure of a streak, then every this many.
REPORT_EVERY = 60
#: A streak this old is an outage, not a retry: its lines are ERROR (age, not count).
PERSISTENT_AFTER_S = 15 * 60.0
#: A process that saw no failure of a subject checks for a stale streak row this often ...
STALE_CHECK_EVERY_S = 60.0
#: ... and ends one nobody has refreshed for this long.
STALE_AFTER_S = 5 * 60.0
#: Stored and logged of an error message at most.
MAX_ERROR_CHARS = 500


@dataclass
class _Tracker:
    """This process's view of one subject's current streak."""

    count: int = 0
    #: Monotonic time of the first failure this process saw (the age when the store is down).
    started: float = field(default_factory=time.monotonic)
    persistent_reported: bool = False


class Streaks:
    """Reports the outcomes of repeated work; one per engine runtime, shared by its loops."""

    def __init__(
        self, db: Database, *, owner: str, secret_values: list[str] | None = None, on_change=None
    ):
        self.db = db
        self.owner = owner
        #: Server credentials (signing keys, API keys) no error message may carry into a row.
        self.secret_values = [v for v in (secret_values or []) if v]
        #: Called with (subject, consecutive failures or 0) when a streak moves (metrics).
        self.on_change = on_change
        self._trackers: dict[str, _Tracker] = {}
        self._stale_checked: dict[str, float] = {}

    def failed(
        self, subject: str, error: BaseException | str, *, now: datetime | None = None
    ) -> None:
        """One more failure of `subject`: record it, and log it if the throttle says so."""
        message = self.describe(error)
        tracker = self._trackers.setdefault(subject, _Tracker())
        tracker.count += 1
        seen = tracker.count  # before any wait: concurrent failures each get their own number
        row = None
        try:
            row = self.db.one(
                "streak_record_failure", subject=subject, error=message, owner=self.owner, now=now
            )
        except Exception as exc:  # the store may be what is failing: the lines still go out
            log.debug("streak %s: could not record the failure: %s", subject, exc)
        count = row["consecutive_failures"] if row else seen
        age_s = row["age_s"] if row else time.monotonic() - tracker.started
        persistent = age_s >= PERSISTENT_AFTER_S
        crossed = persistent and not tracker.persistent_reported
        if self.on_change is not None:
            self.on_change(subject, count)
        if not (crossed or seen == 1 or seen % REPORT_EVERY == 0):
            return
        extra = {"subject": subject, "consecutiveFailures": count, "streakAgeSeconds": round(age_s)}
        if persistent:
            tracker.persistent_reported = True
            log.error(
                "%s failing persistently for %s (%d consecutive failures): %s",
                subject,
                _duration(age_s),
                count,
                message,
                extra=extra,
            )
        else:
            log.warning(
                "%s failed (%d consecutive failures): %s", subject, count, message, extra=extra
            )

    def succeeded(self, subject: str, *, now: datetime | None = None) -> None:
        """`subject` worked: end its streak (one INFO line when there was one)."""
        tracker = self._trackers.pop(subject, None)
        if tracker is None:
            # Cheap path for the common case: most successes follow successes. Only now and
            # then look for a row another (possibly dead) process left behind.
            checked = self._stale_checked.get(subject)
            if checked is not None and time.monotonic() - checked < STALE_CHECK_EVERY_S:
                return
            self._stale_checked[subject] = time.monotonic()
        try:
            if tracker is not None:
                ended = self.db.one("streak_delete", subject=subject)
            else:
                ended = self.db.one(
                    "streak_delete_if_stale", subject=subject, stale_s=STALE_AFTER_S, now=now
                )
        except Exception as exc:
            if tracker is not None:
                self._trackers[subject] = tracker  # try again on the next success
            log.debug("streak %s: could not end the streak: %s", subject, exc)
            return
        count = ended["consecutive_failures"] if ended else (tracker.count if tracker else 0)
        if count and self.on_change is not None:
            self.on_change(subject, 0)
        if count:
            log.info(
                "%s recovered after %d consecutive failures",
                subject,
                count,
                extra={"subject": subject, "afterConsecutiveFailures": count},
            )

    def describe(self, error: BaseException | str) -> str:
        """The error as one bounded line with every known credential scrubbed."""
        if isinstance(error, BaseException):
            text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        else:
            text = str(error)
        text = secrets.redact_credentials(secrets.scrub(text, self.secret_values))
        return " ".join(text.split())[:MAX_ERROR_CHARS]

    def current(self, now: datetime | None = None) -> list[dict]:
        """Every current streak, the longest-running first."""
        return self.db.all("streak_list", now=now)


def subject_kind(subject: str) -> str:
    """A subject with its open-ended part dropped (`integration:cluster:<ns>` ->
    `integration:cluster`): a bounded metric label."""
    return ":".join(subject.split(":")[:2])


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
