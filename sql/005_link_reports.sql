-- 005_link_reports.sql: a retried PUT /v1/links stores its samples once.
-- Applied once, in a transaction, by shoal-server at start-up.
--
-- An agent names each report (report_id, random); a report whose name the
-- node has used before is a retry after a lost answer and stores nothing.
-- Names are kept a day (pruned by the node's own later reports), far
-- longer than an agent retries.
CREATE TABLE link_reports (
    node_id     bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    report_id   text NOT NULL CHECK (report_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, report_id)
);
