"""The deployment task engine: the only writer of task status.

The map: the engine's packages as layers, the lowest first. Each entry says the package's job
and what it may import besides itself, the standard library and third-party libraries (a
package, or one module of it); every one of them is listed before it, so no import climbs and
no two packages import each other, however far round. Nothing here imports the web layer
(blueprints/) or commands/. tests/unit/test_invariants.py checks every import against this map,
function-local ones included, and allows no import cycle between modules or between packages.

trust: what comes from outside: the one sensitivity predicate and its scrub, depth-limited
    loaders, the storable-text rule, the manifest rules.
    May import: nothing.
sql: the named queries, one .sql file per table, loaded once.
    May import: nothing.
errors: the one error base, the domain errors (no HTTP codes) and the fencing signal.
    May import: nothing.
abort: the abort signal every runner and integration call honours.
    May import: nothing.
integrations: stateless, abort-aware adapters (cluster, devbox, gateway, template catalog).
    May import: abort, errors, trust.
db: the connector: a pool, statements by name, psycopg errors translated in one place.
    May import: abort, errors, sql.
operations: running the engine: settings, metrics, failure streaks, observed integration
    calls, logs, migrations.
    May import: abort, db, errors, integrations, sql, trust.
cleanup: what tasks leave behind, as rows and actions: cleanup jobs, runtime rows, local
    process groups (the worker that runs the jobs is maintenance's).
    May import: abort, db, errors, integrations, operations, trust.
core: statuses as data, the one guarded transition, leases, fenced handles, runner notices.
    May import: abort, cleanup, db, errors, operations, trust.
runners: one per source kind family, and the source kinds' registry (runners/kinds.py); they
    act through a TaskHandle and integrations, never storage.
    May import: abort, core.status, errors, integrations, trust.
maintenance: the loops, each named for its duty: the lease renewer, the reaper, the listener,
    the cleanup worker and the purges it runs.
    May import: abort, cleanup, core, db, errors, integrations, operations, trust.
readside: every surface's reads: the task store, timelines, explain, DTOs, waits, follows.
    It never writes a status (no core.transitions).
    May import: core.status, db, errors, maintenance.listener, operations.metrics, runners.kinds,
    trust.
process: the per-process engine: its pool, claims, runners, cancel delivery, drain, and the
    maintenance loops it starts.
    May import: abort, cleanup, core, db, errors, integrations, maintenance, operations, runners,
    trust.
lifecycle: what people do to tasks (create, redeploy, cancel, answer inputs), what operators
    do (lifecycle/operator.py), who they are, idempotent requests.
    May import: abort, cleanup, core, db, errors, integrations, maintenance, operations,
    process, readside, runners, trust.
"""
