"""What the engine forgets, and when: the rows nobody reads once they are old. The cleanup
worker runs these with each tick's housekeeping (engine/maintenance/cleanup_worker.py); tasks
past retention are purged through cleanup jobs (engine/cleanup/jobs.py), the worker's own duty.
"""

from datetime import datetime

from engine.db import Database

#: An Idempotency-Key is honoured this long (engine/lifecycle/idempotency.py): a repeat within
#: it gets the kept answer, and the purge forgets the key after it.
IDEMPOTENCY_KEY_TTL_S = 24 * 3600
IDEMPOTENCY_KEY_PURGE_BATCH = 1000
#: Succeeded and cancelled cleanup jobs are forgotten after this; failed ones stay for diagnosis.
COMPLETED_JOB_KEEP_S = 7 * 24 * 3600.0
COMPLETED_JOB_DELETE_BATCH = 1000


def forget_expired(db: Database, now: datetime | None = None) -> None:
    """Delete a batch of finished cleanup jobs past their keep and of expired idempotency keys."""
    db.execute(
        "cleanup_job_delete_completed",
        keep_s=COMPLETED_JOB_KEEP_S,
        limit=COMPLETED_JOB_DELETE_BATCH,
        now=now,
    )
    purge_idempotency_keys(db, now=now)


def purge_idempotency_keys(
    db: Database, *, now: datetime | None = None, limit: int = IDEMPOTENCY_KEY_PURGE_BATCH
) -> int:
    """Delete a batch of expired idempotency keys; how many."""
    return db.execute(
        "idempotency_key_delete_expired", ttl_s=IDEMPOTENCY_KEY_TTL_S, limit=limit, now=now
    )
