-- 003_nccl.sql: the NCCL unique id of each stage's data-parallel group.
-- Applied once, in a transaction, by shoal-server at start-up.
--
-- On CUDA nodes a stage's replicas all-reduce their gradients through one
-- NCCL communicator.  Its members must share the 128-byte ncclUniqueId that
-- replica 0 creates; they have no channel of their own before the
-- communicator exists, so replica 0 PUTs it here and the others GET it.
-- One id per (job, plan epoch, stage): a new epoch is a new group.
CREATE TABLE nccl_ids (
    job_id      bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    epoch       integer NOT NULL CHECK (epoch >= 0),
    stage       integer NOT NULL CHECK (stage >= 0),
    -- the id's 128 bytes as lowercase hex (a regex bound stops at 255, hence length())
    unique_id   text NOT NULL CHECK (length(unique_id) = 256 AND unique_id ~ '^[0-9a-f]+$'),
    created_at  timestamptz NOT NULL DEFAULT now(),   -- the latest put
    PRIMARY KEY (job_id, epoch, stage)
);
