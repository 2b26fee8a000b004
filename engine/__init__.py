"""The deployment task engine: the only writer of task status.

The map, lowest layer first: each package's job, and what it may import besides itself, the
standard library and third-party libraries (a package, or one module of it; an entry for one
module adds to its package's). Nothing here imports the web layer (blueprints/) or commands/.
tests/unit/test_invariants.py checks every import against this map, function-local ones
included, and allows no import cycle between modules.

trust: what comes from outside: the one sensitivity predicate and its scrub, depth-limited
    loaders, the storable-text rule, the manifest rules.
    May import: nothing.
sql: the named queries, one .sql file per table, loaded once.
    May import: nothing.
db: the connector: a pool, statements by name, psycopg errors translated in one place.
    May import: sql, core.abort, core.errors.
core: statuses as data, the one guarded transition, leases, fenced handles, runner notices, the
    reaper, the abort signal, the domain errors.
    May import: db, trust, cleanup.jobs, cleanup.task_runtimes, operations.config,
    operations.metrics, operations.streaks.
integrations: stateless, abort-aware adapters (cluster, devbox, gateway, template catalog).
    May import: core.abort, trust.
runners: one per source kind family, and the source kinds' registry (runners/kinds.py); they
    act through a TaskHandle and integrations, never storage.
    May import: core.abort, core.status, integrations, trust.
operations: running the engine: settings, metrics, failure streaks, observed integration
    calls, logs, migrations.
    May import: core.abort, db, integrations, sql, trust.
operations.operator: the operator's use cases (the CLI calls them), on top of the engine like
    the web layer.
    May import: core.errors, lifecycle, process, readside.
readside: every surface's reads: the task store, timelines, explain, DTOs, waits, the listener.
    It never writes a status (no core.transitions).
    May import: core.errors, core.status, db, operations.metrics, runners.kinds, trust.
cleanup: releasing what tasks leave behind: cleanup jobs and their worker, runtime rows, local
    process groups.
    May import: core.abort, core.status, db, integrations, lifecycle.idempotency,
    operations.config, operations.streaks.
process: the per-process engine: its pool, reaper, claims, runners, listener, cleanup worker.
    May import: cleanup, core, db, integrations, operations, readside, runners, trust.
lifecycle: what people do to tasks (create, redeploy, cancel, answer inputs), who they are,
    idempotent requests.
    May import: core, db, integrations, operations, process, readside, runners, trust.

Imports that climb to a package listed later, each for its reason (no others):
- db -> core: the connector raises the core's domain errors and honours its abort signal.
- core -> cleanup: the handle records a run's runtimes; the reaper files cleanup jobs.
- core -> operations: transitions and the reaper count metrics, read settings, keep streaks.
- cleanup -> lifecycle: the cleanup worker purges expired idempotency keys.
- operations -> readside, lifecycle, process: the operator's use cases (operations.operator).
"""
