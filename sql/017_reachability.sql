-- 017_reachability.sql: whether the server reaches each node's peer port
-- from outside (server/jobs/reach.c probes it the way a neighbour would:
-- connect, the listener's greeting, a ping), the first fact of reaching
-- agents behind NAT or a closed firewall.  NULL: not checked yet (or the
-- node's address changed since).  Shown in node_json as "reachable".
-- Applied once, in a transaction, by shoal-server at start-up.

ALTER TABLE nodes ADD COLUMN peer_reachable boolean;
ALTER TABLE nodes ADD COLUMN peer_reach_why text;           -- why not, as the probe saw it
ALTER TABLE nodes ADD COLUMN peer_checked_at timestamptz;
ALTER TABLE nodes ADD COLUMN peer_checked_address text;     -- the address that was probed

-- A node as the API shows it, now with "reachable": {from_server (true,
-- false, or null before the first check), why (null unless false),
-- checked_at}.  The address checked must be the node's current one.
CREATE OR REPLACE FUNCTION node_json(n nodes) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object('id', n.id, 'name', n.name, 'peer_address', n.peer_address, 'region', n.region,
    'state', n.state, 'hardware', json_build_object('gpu_model', n.gpu_model,
      'gpu_memory_bytes', n.gpu_memory_bytes, 'gpu_count', n.gpu_count, 'tflops', n.tflops,
      'cpu_cores', n.cpu_cores, 'ram_bytes', n.ram_bytes),
    'current_job_id', n.current_job_id, 'current_step', n.current_step,
    'registered_at', n.registered_at, 'last_heartbeat_at', n.last_heartbeat_at,
    'reachable', CASE WHEN n.peer_checked_address = n.peer_address THEN
        json_build_object('from_server', n.peer_reachable, 'why', n.peer_reach_why, 'checked_at', n.peer_checked_at)
      ELSE json_build_object('from_server', NULL, 'why', NULL, 'checked_at', NULL) END)
$$;

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

-- The link matrix, now with "reachable": row i from nodes[i], column j to
-- nodes[j]: true, false (the last try could not connect), or null (never
-- tried, or i = j).
CREATE OR REPLACE FUNCTION links_matrix_json() RETURNS json LANGUAGE sql STABLE AS $$
  WITH ids AS (SELECT id FROM nodes WHERE removed_at IS NULL),
    ll AS MATERIALIZED (SELECT * FROM links_latest),
    cells AS (SELECT a.id AS a, b.id AS b, ll.latency_ms, ll.bandwidth_gbps, ll.measured_at, r.reachable
      FROM ids a CROSS JOIN ids b
      LEFT JOIN ll ON ll.from_node = a.id AND ll.to_node = b.id
      LEFT JOIN link_reach r ON r.from_node = a.id AND r.to_node = b.id),
    rows AS (SELECT a, json_agg(latency_ms ORDER BY b) AS lat,
        json_agg(bandwidth_gbps ORDER BY b) AS bw, json_agg(measured_at ORDER BY b) AS at,
        json_agg(reachable ORDER BY b) AS reach
      FROM cells GROUP BY a)
  SELECT json_build_object(
    'nodes', (SELECT coalesce(json_agg(id ORDER BY id), '[]') FROM ids),
    'latency_ms', (SELECT coalesce(json_agg(lat ORDER BY a), '[]') FROM rows),
    'bandwidth_gbps', (SELECT coalesce(json_agg(bw ORDER BY a), '[]') FROM rows),
    'measured_at', (SELECT coalesce(json_agg(at ORDER BY a), '[]') FROM rows),
    'reachable', (SELECT coalesce(json_agg(reach ORDER BY a), '[]') FROM rows))
$$;
