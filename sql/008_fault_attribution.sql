-- 008_fault_attribution.sql: failure reports name the node that failed to
-- deliver; the server judges each one (server/recovery.c) and leaves the
-- node or link at fault out of the job's next plans.
-- Applied once, in a transaction, by shoal-server at start-up.

-- One row per failure report counted against a plan epoch: the tasklet
-- that reported, the neighbour it named (NULL: none, or not one of its
-- neighbours in that plan), and once judged, the verdict: 'node' (culprit_node
-- did not answer the server's probe of its peer port, or failed by itself)
-- or 'link' (both ends answered: the link between reporter and suspect).
CREATE TABLE job_faults (
    id            bigserial PRIMARY KEY,
    job_id        bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    epoch         integer NOT NULL,
    stage         integer NOT NULL,
    replica       integer NOT NULL,
    reporter_node bigint REFERENCES nodes (id) ON DELETE SET NULL,
    suspect_node  bigint REFERENCES nodes (id) ON DELETE SET NULL,
    reason        text NOT NULL,
    reported_at   timestamptz NOT NULL DEFAULT now(),
    verdict       text CHECK (verdict IN ('node', 'link')),
    culprit_node  bigint REFERENCES nodes (id) ON DELETE SET NULL,
    judgement     text,
    judged_at     timestamptz
);
CREATE INDEX job_faults_job ON job_faults (job_id, epoch);
CREATE INDEX job_faults_unjudged ON job_faults (job_id) WHERE judged_at IS NULL;
