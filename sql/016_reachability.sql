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

-- True when node a cannot connect to node b's peer port, as far as is
-- known: its agent said so when it last tried (link_reach), or, never
-- having tried, the server cannot reach b's port from outside either.
CREATE OR REPLACE FUNCTION link_blocked(a bigint, b bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT NOT r.reachable FROM link_reach r WHERE r.from_node = a AND r.to_node = b),
                  (SELECT n.peer_reachable = false AND n.peer_checked_address = n.peer_address
                   FROM nodes n WHERE n.id = b), false)
$$;

-- Who dials a pipeline link: stage s dials stage s+1 of its replica
-- (dials_next), unless s cannot connect to s+1 and s+1 can connect to s,
-- when s+1 dials s instead.  Decided when the plan is stored (planner.c),
-- so both ends read the same answer.
ALTER TABLE assignments ADD COLUMN dials_next boolean NOT NULL DEFAULT true;
