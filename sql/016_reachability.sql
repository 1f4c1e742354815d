-- 016_reachability.sql: who can connect to whom, the first facts of
-- reaching agents behind NAT or a closed firewall.  Per node, whether the
-- server reaches its peer port from outside (server/jobs/reach.c probes it
-- the way a neighbour would: connect, the listener's greeting, a ping;
-- NULL: not checked yet, or the node's address changed since); per
-- direction, whether an agent could connect to another's peer port.  The
-- read models (017_read_models.sql) show both as "reachable".  Applied
-- once, in a transaction, by shoal-server at start-up.

ALTER TABLE nodes ADD COLUMN peer_reachable boolean;
ALTER TABLE nodes ADD COLUMN peer_reach_why text;           -- why not, as the probe saw it
ALTER TABLE nodes ADD COLUMN peer_checked_at timestamptz;
ALTER TABLE nodes ADD COLUMN peer_checked_address text;     -- the address that was probed

-- Per direction, whether an agent could connect to another's peer port at
-- all when it last tried to measure the link (PUT /v1/links: a measured
-- sample says yes; {"to", "reachable": false, "why"} says no).  No row:
-- never tried.
CREATE TABLE link_reach (
    from_node   bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    to_node     bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    reachable   boolean NOT NULL,
    why         text,                                    -- what the dialer saw, when not
    checked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_node, to_node)
);
