-- 014_node_removal.sql: an operator removes a lost node's record
-- (DELETE /v1/nodes/{id}): it leaves the fleet's lists, its links and its
-- metrics, and its token stops working, while the jobs' history that names
-- it (plans, steps, checkpoints, faults) keeps its id.  NULL: in the fleet.
-- Applied once, in a transaction, by shoal-server at start-up.

ALTER TABLE nodes ADD COLUMN removed_at timestamptz;
ALTER TABLE nodes ADD CONSTRAINT removed_nodes_are_lost CHECK (removed_at IS NULL OR state = 'lost');
