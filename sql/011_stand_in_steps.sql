-- 011_stand_in_steps.sql: a tasklet that dies after its step's gradient
-- all-reduce, before it reports the step, leaves the step done (its
-- stage's other replicas applied it) but unrecorded.  A live resume then
-- records the step for it (server/live_resume.c).
-- Applied once, in a transaction, by shoal-server at start-up.

-- The last stage's report of a step carries the loss of the ring's previous
-- replica (agent/ring.h: the losses go round before the all-reduce), so a
-- replica that dies before its report leaves its loss with a survivor.
ALTER TABLE job_steps ADD COLUMN ring_prev_loss double precision;

-- true: recorded by the server for a tasklet that finished the step's
-- all-reduce and died before its report: the loss, where it is the last
-- stage's, from the next replica's ring_prev_loss; no times.
ALTER TABLE job_steps ADD COLUMN stand_in boolean NOT NULL DEFAULT false;
