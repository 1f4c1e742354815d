-- 004_recovery.sql: jobs that survive lost nodes and failed steps.
-- Applied once, in a transaction, by shoal-server at start-up.
--
-- A failure report or a lost node moves a live job to 'recovering'; the
-- server re-plans it on the nodes still live (server/recovery.c), and the
-- new epoch starts from the job's latest complete checkpoint.

-- Re-plans after a failure so far; past --max-recoveries the job fails.
ALTER TABLE jobs ADD COLUMN recoveries integer NOT NULL DEFAULT 0 CHECK (recoveries >= 0);
-- Why the job is recovering (or last was): the failure or the lost node,
-- then what the re-plan waits for.
ALTER TABLE jobs ADD COLUMN recovery_reason text;
-- The earliest re-plan: a failure report names a peer that may be dead;
-- waiting one heartbeat timeout lets a dead peer's heartbeat go stale, so
-- the re-plan does not pick it again.
ALTER TABLE jobs ADD COLUMN recover_after timestamptz;
-- What a due re-plan waits for (too few live nodes); NULL when nothing.
ALTER TABLE jobs ADD COLUMN recovery_waiting text;

-- The step of the job's own checkpoint an epoch starts from; NULL: the
-- start the job's spec gives (step 0, or its resume_from).
ALTER TABLE plans ADD COLUMN resume_step bigint CHECK (resume_step >= 0);

CREATE INDEX jobs_recovering ON jobs (recover_after) WHERE state = 'recovering';

-- The layers a checkpoint's stage file holds, as its uploader says (the
-- file's own header says the same; the agent checks).  A re-plan may split
-- the layers differently: a stage then assembles its layers from every file
-- that holds some of them.  NULL for files from before this migration.
ALTER TABLE checkpoints ADD COLUMN layer_start integer CHECK (layer_start >= 0);
ALTER TABLE checkpoints ADD COLUMN layer_end integer CHECK (layer_end > layer_start);
