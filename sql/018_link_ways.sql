-- 018_link_ways.sql: how each connection of a plan is made, for every
-- link a plan needs (issue 37): the pipeline link from stage s to s+1
-- (next_way), the ring edge from replica r to r+1 of a stage (up_way), and
-- the tied head's edge from the first or last stage to the other end
-- (tie_way).  'dial': the sending end (s, r, or the tied end) dials the
-- other's peer port; 'reverse': the other end dials it (the sender cannot
-- connect to the receiver, which can connect back); 'relay': neither can,
-- so both dial the plan's relay (plans.relay, shoal-relay), which pairs
-- the two connections and forwards their bytes.  Decided when the plan is
-- stored (planner.c), so both ends read the same answer.  Applied once, in
-- a transaction, by shoal-server at start-up.

ALTER TABLE plans ADD COLUMN relay text;            -- host:port of the relay its relayed links use; NULL: none

ALTER TABLE assignments
    ADD COLUMN next_way text NOT NULL DEFAULT 'dial' CHECK (next_way IN ('dial', 'reverse', 'relay')),
    ADD COLUMN up_way text NOT NULL DEFAULT 'dial' CHECK (up_way IN ('dial', 'reverse', 'relay')),
    ADD COLUMN tie_way text NOT NULL DEFAULT 'dial' CHECK (tie_way IN ('dial', 'reverse', 'relay'));
UPDATE assignments SET next_way = 'reverse' WHERE NOT dials_next;
-- dials_next (016) stays as what it said: stage s opens the connection
-- (to s+1, or to the relay)
ALTER TABLE assignments DROP COLUMN dials_next;
ALTER TABLE assignments ADD COLUMN dials_next boolean GENERATED ALWAYS AS (next_way <> 'reverse') STORED;

-- The way of the connection on which node a sends to node b (b NULL: no
-- such link): a dials unless it cannot reach b; then b dials if it can
-- reach a; else the relay, when the plan has one.  A pair blocked both
-- ways with no relay is dialled as usual (and fails, saying so): the
-- scheduler avoids such pairs where it can (planner.c).
CREATE OR REPLACE FUNCTION link_way(a bigint, b bigint, relay boolean) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN b IS NULL OR NOT link_blocked(a, b) THEN 'dial'
              WHEN NOT link_blocked(b, a) THEN 'reverse'
              WHEN relay THEN 'relay'
              ELSE 'dial' END
$$;

-- Each node's link to a relay, as its agent measured it (echoes through
-- the relay: GET /v1/agent/probes names the relay while the node's
-- measurement is missing or stale, PUT /v1/links "relay" reports it).
CREATE TABLE relay_links (
    node_id         bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    relay           text NOT NULL,                    -- host:port, as the server's --relay names it
    latency_ms      double precision NOT NULL,        -- ms, the round trip's half
    bandwidth_gbps  double precision NOT NULL,        -- Gbit/s, echoed: what goes both ways at once
    measured_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, relay)
);

-- The links as the planner prices them: links_matrix_json's latency_ms and
-- bandwidth_gbps (null: not measured), with the cells a turned or relayed
-- connection fills.  A direction a to b that a cannot connect (so never
-- measured) while b can connect to a is priced as b to a measured: the
-- connection is dialled from b and carries both ways.  With a relay, a
-- pair blocked both ways is priced as its two hops through the relay:
-- latency the sum of a's and b's measured links to it, bandwidth the lesser
-- (relay_links); where one end has not measured it yet, each end's lowest
-- measured latency to any peer and highest bandwidth stand in (what its
-- own access link has shown).  With no relay, a pair blocked both ways is
-- priced as unusable (avoided_latency_ms, avoided_bandwidth_gbps: the
-- planner's, as for a link blamed for failures), so that the search keeps
-- them apart where it can.
CREATE OR REPLACE FUNCTION planning_links_json(relay text, avoided_latency_ms float8,
                                               avoided_bandwidth_gbps float8) RETURNS json LANGUAGE sql STABLE AS $$
  WITH ids AS (SELECT id FROM nodes WHERE removed_at IS NULL),
    ll AS MATERIALIZED (SELECT * FROM links_latest),
    best AS (SELECT i.id AS n, coalesce(rl.bandwidth_gbps, x.bw) AS bw, coalesce(rl.latency_ms, x.lat) AS lat,
        rl.node_id IS NOT NULL AS measured
      FROM ids i
      LEFT JOIN relay_links rl ON rl.node_id = i.id AND rl.relay = planning_links_json.relay
      LEFT JOIN (SELECT n, max(bandwidth_gbps) AS bw, min(latency_ms) AS lat
        FROM (SELECT from_node AS n, bandwidth_gbps, latency_ms FROM ll
              UNION ALL SELECT to_node, bandwidth_gbps, latency_ms FROM ll) y GROUP BY n) x ON x.n = i.id),
    cells AS (SELECT a.id AS a, b.id AS b, f.latency_ms AS f_lat, f.bandwidth_gbps AS f_bw,
        CASE WHEN f.from_node IS NULL AND a.id <> b.id AND link_blocked(a.id, b.id) THEN
          CASE WHEN NOT link_blocked(b.id, a.id) THEN 'turned' WHEN relay IS NOT NULL THEN 'relayed'
               ELSE 'blocked' END END AS way,
        r.latency_ms AS r_lat, r.bandwidth_gbps AS r_bw, ba.lat + bb.lat AS h_lat, least(ba.bw, bb.bw) AS h_bw
      FROM ids a CROSS JOIN ids b
      LEFT JOIN ll f ON f.from_node = a.id AND f.to_node = b.id
      LEFT JOIN ll r ON r.from_node = b.id AND r.to_node = a.id
      LEFT JOIN best ba ON ba.n = a.id LEFT JOIN best bb ON bb.n = b.id),
    rows AS (SELECT a,
        json_agg(CASE way WHEN 'turned' THEN r_lat WHEN 'relayed' THEN h_lat
                          WHEN 'blocked' THEN avoided_latency_ms ELSE f_lat END ORDER BY b) AS lat,
        json_agg(CASE way WHEN 'turned' THEN r_bw WHEN 'relayed' THEN h_bw
                          WHEN 'blocked' THEN avoided_bandwidth_gbps ELSE f_bw END ORDER BY b) AS bw
      FROM cells GROUP BY a)
  SELECT json_build_object(
    'nodes', (SELECT coalesce(json_agg(id ORDER BY id), '[]') FROM ids),
    'latency_ms', (SELECT coalesce(json_agg(lat ORDER BY a), '[]') FROM rows),
    'bandwidth_gbps', (SELECT coalesce(json_agg(bw ORDER BY a), '[]') FROM rows))
$$;
