-- 007_faults.sql: a job refused at schedule says why, and so does one whose
-- checkpoints the server cannot store.
-- Applied once, in a transaction, by shoal-server at start-up.

-- The last refusal of POST /v1/jobs/{id}/schedule or /plan for a job that
-- stayed pending (too few live nodes, unmeasured links, no plan that fits):
-- {"status", "code", "message", "at"}.  NULL once a plan is stored.
ALTER TABLE jobs ADD COLUMN schedule_refused jsonb;

-- Checkpoint uploads of the job that the server's store failed (a full or
-- read-only disk, an I/O error), and the latest one's reason while the
-- store keeps failing: NULL again once a checkpoint of the job is stored.
ALTER TABLE jobs ADD COLUMN checkpoint_failures integer NOT NULL DEFAULT 0 CHECK (checkpoint_failures >= 0);
ALTER TABLE jobs ADD COLUMN checkpoint_error text;
