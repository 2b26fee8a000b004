-- Benchmark-only SQL: seeding rows and the baselines the engine is compared with. Never loaded by
-- the engine.

-- bench_task_insert_leased --
-- Seed %(n)s tasks in %(status)s, each holding a lease of %(owner)s at epoch 1.
INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status, phase,
                          source, lease_owner, lease_epoch, lease_expires_at, lease_claimed_at)
SELECT 'bench', 'p' || (g %% 50), 'bench', 'image', 'direct', %(status)s::task_status, 'apply',
       jsonb_build_object('kind', 'image', 'image', 'nginx:1.27', 'name', 'web-' || g),
       %(owner)s, 1, now() + interval '1 hour', now()
FROM generate_series(1, %(n)s) g
RETURNING id;

-- bench_task_insert_finished --
-- Seed %(n)s finished tasks: the history a real table carries next to its active rows.
INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status, source,
                          finished_at, failure_reason)
SELECT 'bench', 'p' || (g %% 50), 'bench', 'image', 'direct', 'failed',
       jsonb_build_object('kind', 'image', 'image', 'nginx:1.27', 'name', 'old-' || g),
       now() - interval '1 day', 'interrupted'
FROM generate_series(1, %(n)s) g;

-- bench_task_set_status_plain --
-- Baseline for a guarded transition: the same status change as one unguarded single-row UPDATE.
UPDATE deploy_tasks SET status = %(to)s::task_status WHERE id = %(task_id)s;

-- bench_task_extend_leases_plain --
-- Baseline for a renewal tick: extend the same leases with no epoch/owner fence, nothing returned.
UPDATE deploy_tasks SET lease_expires_at = now() + make_interval(secs => %(lease_ttl_s)s)
WHERE id = ANY(%(task_ids)s::uuid[]);

-- bench_task_insert_project_board --
-- Seed %(n)s tasks of one project in a dashboard's usual mix: a few active, most finished (some
-- failed, some redeployed), each with the resources it applied.
INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status, phase,
                          source, artifact_summary, finished_at, failure_reason, failure_message,
                          lease_owner, lease_epoch, lease_expires_at, lease_claimed_at, created_at)
SELECT 'default', %(project)s, 'bench', 'image', 'direct', s.status, 'apply',
       jsonb_build_object('kind', 'image', 'image', 'nginx:1.' || g, 'name', 'app-' || (g %% 40)),
       jsonb_build_object('appliedResources', jsonb_build_array(
           jsonb_build_object('kind', 'Deployment', 'name', 'app-' || (g %% 40)),
           jsonb_build_object('kind', 'Service', 'name', 'app-' || (g %% 40)))),
       CASE WHEN s.status IN ('running', 'applying') THEN NULL ELSE now() - make_interval(secs => g) END,
       CASE WHEN s.status = 'failed' THEN 'apply_failed' END,
       CASE WHEN s.status = 'failed' THEN 'applying Deployment/app failed: simulated' END,
       CASE WHEN s.status IN ('running', 'applying') THEN 'bench-elsewhere' END,
       CASE WHEN s.status IN ('running', 'applying') THEN 1 ELSE 0 END,
       CASE WHEN s.status IN ('running', 'applying') THEN now() + interval '1 hour' END,
       CASE WHEN s.status IN ('running', 'applying') THEN now() END,
       now() - make_interval(secs => g)
FROM generate_series(1, %(n)s) g,
     LATERAL (SELECT (CASE WHEN g %% 25 = 0 THEN 'applying' WHEN g %% 7 = 0 THEN 'failed'
                           WHEN g %% 11 = 0 THEN 'cancelled' ELSE 'completed' END)::task_status
              AS status) s;

-- bench_task_count_in_flight --
-- Tasks of %(project_id)s a runner holds right now (running or applying).
SELECT count(*) AS n FROM deploy_tasks
WHERE project_id = %(project_id)s AND status IN ('running', 'applying');
