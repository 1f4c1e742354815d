-- 010_fewer_replicas.sql: a job re-planned with too few nodes for all its
-- replicas goes on with fewer, each training more micro-batches, so the
-- global batch (replicas x micro-batches) is the job's (server/planner.c).
-- Applied once, in a transaction, by shoal-server at start-up.

-- The data-parallel replicas and the micro-batches per replica and step of
-- each plan epoch.  A step is whole when stages x the replicas of the epoch
-- that trained it reported it.
ALTER TABLE plans
    ADD COLUMN replicas integer CHECK (replicas >= 1),
    ADD COLUMN micro_batches integer CHECK (micro_batches >= 1);
UPDATE plans p SET replicas = j.replicas, micro_batches = (j.spec->'parallelism'->>'micro_batches')::int
    FROM jobs j WHERE j.id = p.job_id;
ALTER TABLE plans ALTER COLUMN replicas SET NOT NULL, ALTER COLUMN micro_batches SET NOT NULL;
