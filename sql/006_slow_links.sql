-- 006_slow_links.sql: validation loss, bytes on the wire per step, and a
-- checkpoint file per replica under DiLoCo.
-- Applied once, in a transaction, by shoal-server at start-up.

-- What each tasklet reports beside its timings (agent/train.c): the
-- validation pass after the step (the last stage's mean over the
-- validation micro-batches it ran, and how many; the server weighs the
-- replicas' means into the job's), and the bytes it sent on its pipeline
-- links and to its data-parallel group during the step.  NULL: not
-- reported (no validation that step, or an agent from before).
ALTER TABLE job_steps ADD COLUMN eval_s double precision;
ALTER TABLE job_steps ADD COLUMN val_loss double precision;
ALTER TABLE job_steps ADD COLUMN val_micro_batches integer CHECK (val_micro_batches >= 0);
ALTER TABLE job_steps ADD COLUMN stage_link_bytes bigint CHECK (stage_link_bytes >= 0);
ALTER TABLE job_steps ADD COLUMN sync_bytes bigint CHECK (sync_bytes >= 0);

-- Under sync "diloco" every replica of a stage keeps its own AdamW moments
-- and error feedback, so a checkpoint holds one file per (stage, replica);
-- otherwise replica 0's file is the stage's.  Existing rows are replica 0.
ALTER TABLE checkpoints ADD COLUMN replica integer NOT NULL DEFAULT 0 CHECK (replica >= 0);
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
ALTER TABLE checkpoints ADD PRIMARY KEY (job_id, step, stage, replica);
