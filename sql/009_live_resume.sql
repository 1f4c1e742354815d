-- 009_live_resume.sql: a job re-planned after a failure may go on from the
-- state its surviving tasklets hold in memory (agent/live.h,
-- server/live_resume.c) instead of from its last checkpoint.
-- Applied once, in a transaction, by shoal-server at start-up.

-- What an idle agent says it holds: the stage its last unfinished tasklet
-- left, {job, layers [start, end), AdamW steps taken}; all NULL: nothing.
-- held_at: the agent's last idle heartbeat, which says so (held or not).
ALTER TABLE nodes
    ADD COLUMN held_job_id bigint,
    ADD COLUMN held_layer_start integer,
    ADD COLUMN held_layer_end integer,
    ADD COLUMN held_step bigint,
    ADD COLUMN held_at timestamptz;

-- When the job last went to recovery: a re-plan waits a moment for the
-- plan's survivors to say what they hold after it.
ALTER TABLE jobs ADD COLUMN recovery_started_at timestamptz;

-- A live resume: {step, roots: [per stage, the replica that hands its state
-- round the stage's ring, or null when every replica holds it]}; NULL: the
-- epoch starts from a checkpoint (resume_step) or the start.
ALTER TABLE plans ADD COLUMN live jsonb;
