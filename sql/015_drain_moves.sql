-- 015_drain_moves.sql: a drain moves the drained node's job off it
-- (POST /v1/nodes/{id}/drain).  The job goes to recovery as after a
-- failure, but nothing failed: true while the recovery in progress is such
-- a move, so that the reports of its neighbours (they see the drained
-- node's tasklet stop) blame no node or link, and it is not counted
-- against --max-recoveries.  Applied once, in a transaction, by
-- shoal-server at start-up.

ALTER TABLE jobs ADD COLUMN recovery_moved boolean NOT NULL DEFAULT false;
