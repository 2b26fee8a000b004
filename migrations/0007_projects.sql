-- Projects a user started from the landing page before deploying anything into them, per
-- workspace (namespace). Projects with tasks need no row here: the landing page lists both in one
-- read. A row is no task data: it references no task and holds no user input beyond the id, so
-- retention's purge of finished tasks neither touches nor needs to touch it (a project whose
-- tasks were all purged simply stays listed, as one with no deployments).
CREATE TABLE IF NOT EXISTS projects (
    namespace  text NOT NULL,
    project_id text NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, project_id)
);
