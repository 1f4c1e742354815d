-- 020_plan_visible.sql: what a plan does, made visible (issue 46): each
-- link of a plan with how it is made, in GET /v1/jobs/{id}; what the agents
-- find when they probe the relay, including that it does not answer; and
-- a relayed pair planned only where both ends reach the relay.  Applied
-- once, in a transaction, by shoal-server at start-up.

-- Each node's latest probe of a relay (PUT /v1/links "relay"): reachable,
-- or not with the agent's reason.  relay_links keeps the measurement of
-- the last probe that worked; this says whether the latest one did.
CREATE TABLE relay_reach (
    node_id     bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    relay       text NOT NULL,                    -- host:port, as the server's --relay names it
    reachable   boolean NOT NULL,
    why         text,                             -- the agent's reason when not reachable
    checked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, relay)
);

-- 1 when node n may use relay `relay`: its agent's latest probe of it did
-- not fail (never probed counts as usable: the planner then prices it from
-- the node's peer links, 018_link_ways.sql).
CREATE OR REPLACE FUNCTION relay_usable(n bigint, relay text) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT relay IS NOT NULL AND NOT EXISTS (SELECT 1 FROM relay_reach r
    WHERE r.node_id = n AND r.relay = relay_usable.relay AND NOT r.reachable)
$$;

-- As 018_link_ways.sql's, but a pair blocked both ways is relayed only
-- when both ends reach the relay (relay_usable); else it is priced as
-- unusable (blocked), so that the search keeps it apart where it can and
-- the planner names the relay when it cannot (planner.c).
CREATE OR REPLACE FUNCTION planning_links_json(relay text, avoided_latency_ms float8,
                                               avoided_bandwidth_gbps float8) RETURNS json LANGUAGE sql STABLE AS $$
  WITH ids AS (SELECT id FROM nodes WHERE removed_at IS NULL),
    ll AS MATERIALIZED (SELECT * FROM links_latest),
    best AS (SELECT i.id AS n, coalesce(rl.bandwidth_gbps, x.bw) AS bw, coalesce(rl.latency_ms, x.lat) AS lat,
        relay_usable(i.id, planning_links_json.relay) AS usable
      FROM ids i
      LEFT JOIN relay_links rl ON rl.node_id = i.id AND rl.relay = planning_links_json.relay
      LEFT JOIN (SELECT n, max(bandwidth_gbps) AS bw, min(latency_ms) AS lat
        FROM (SELECT from_node AS n, bandwidth_gbps, latency_ms FROM ll
              UNION ALL SELECT to_node, bandwidth_gbps, latency_ms FROM ll) y GROUP BY n) x ON x.n = i.id),
    cells AS (SELECT a.id AS a, b.id AS b, f.latency_ms AS f_lat, f.bandwidth_gbps AS f_bw,
        CASE WHEN f.from_node IS NULL AND a.id <> b.id AND link_blocked(a.id, b.id) THEN
          CASE WHEN NOT link_blocked(b.id, a.id) THEN 'turned' WHEN ba.usable AND bb.usable THEN 'relayed'
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

-- The links of plan p_plan, each once, with how it is made
-- (018_link_ways.sql): "stage" from stage s to s+1 of a replica (way: the
-- first's next_way), "ring" from replica r to r+1 of a stage's group (up_way;
-- two replicas: both directions, each a connection), "tied_head" from the
-- first or last stage to the other end of its replica when the model's
-- head is tied across stages (tie_way).  from/to: {stage, replica,
-- node_id}; from is the end that sends on it (for "stage", the forward
-- direction; activation gradients come back on the same connection).
CREATE OR REPLACE FUNCTION plan_links_json(p_plan bigint) RETURNS json LANGUAGE sql STABLE AS $$
  WITH p AS (SELECT pl.id, pl.replicas, j.stages,
        coalesce((j.spec #>> '{model,tie_embeddings}')::boolean, false) AND j.stages > 1 AS tied
      FROM plans pl JOIN jobs j ON j.id = pl.job_id WHERE pl.id = p_plan),
    a AS (SELECT a.* FROM assignments a JOIN p ON a.plan_id = p.id),
    l AS (SELECT 'stage' AS kind, 0 AS k, x.stage AS fs, x.replica AS fr, x.node_id AS fn,
          y.stage AS ts, y.replica AS tr, y.node_id AS tn, x.next_way AS way
        FROM a x JOIN a y ON y.replica = x.replica AND y.stage = x.stage + 1
      UNION ALL SELECT 'ring', 1, x.stage, x.replica, x.node_id, y.stage, y.replica, y.node_id, x.up_way
        FROM a x JOIN p ON true JOIN a y ON y.stage = x.stage AND y.replica = (x.replica + 1) % p.replicas
        WHERE p.replicas > 1
      UNION ALL SELECT 'tied_head', 2, x.stage, x.replica, x.node_id, y.stage, y.replica, y.node_id, x.tie_way
        FROM a x JOIN p ON p.tied JOIN a y ON y.replica = x.replica
          AND ((x.stage = 0 AND y.stage = p.stages - 1) OR (x.stage = p.stages - 1 AND y.stage = 0)))
  SELECT coalesce(json_agg(json_build_object('kind', kind,
      'from', json_build_object('stage', fs, 'replica', fr, 'node_id', fn),
      'to', json_build_object('stage', ts, 'replica', tr, 'node_id', tn), 'way', way)
    ORDER BY k, fs, fr, ts, tr), '[]')
  FROM l
$$;

-- As 017_read_models.sql's, and the plan's relay (null: none), its links
-- (plan_links_json) and the bytes per step its cost model predicts
-- (planner.c: {stage_links, sync, tied_head}; null for a plan made before).
CREATE OR REPLACE FUNCTION job_detail_json(p_job bigint) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT (job_json(j)::jsonb || jsonb_build_object(
    'plan', (SELECT json_build_object('epoch', p.epoch, 'cost_model', p.cost_model,
        'predicted_iteration_s', p.predicted_iteration_s, 'created_at', p.created_at,
        'breakdown', p.detail->'breakdown', 'baselines', p.detail->'baselines',
        'predictions', p.detail->'predictions', 'forced', coalesce((p.detail->>'forced')::boolean, false),
        'replicas', p.replicas, 'micro_batches', p.micro_batches,
        'relay', p.relay, 'bytes_per_step', p.detail->'bytes_per_step',
        'assignments', (SELECT coalesce(json_agg(json_build_object('stage', a.stage,
            'replica', a.replica, 'node_id', a.node_id, 'layer_start', a.layer_start,
            'layer_end', a.layer_end, 'dials_next', a.dials_next) ORDER BY a.stage, a.replica), '[]')
          FROM assignments a WHERE a.plan_id = p.id),
        'links', plan_links_json(p.id))
      FROM plans p WHERE p.job_id = j.id ORDER BY p.epoch DESC LIMIT 1),
    'traffic', job_traffic(j.id),
    'faults', (SELECT coalesce(json_agg(json_build_object('epoch', f.epoch, 'stage', f.stage,
        'replica', f.replica, 'reporter_node', f.reporter_node, 'suspect_node', f.suspect_node,
        'reason', f.reason, 'reported_at', f.reported_at, 'verdict', f.verdict,
        'culprit_node', f.culprit_node, 'judgement', f.judgement) ORDER BY f.id), '[]')
      FROM (SELECT * FROM job_faults WHERE job_id = j.id ORDER BY id DESC LIMIT 20) f),
    'excluded_nodes', (SELECT coalesce(json_agg(x.node_id ORDER BY x.node_id), '[]')
      FROM job_excluded_nodes(j.id, j.plan_epoch) x),
    'progress', (SELECT json_build_object('step', t.step, 'loss', t.loss, 'iteration_s', t.iteration_s,
        'reported_at', t.reported_at,
        'val_step', (SELECT v.step FROM job_val_losses(j.id) v ORDER BY v.step DESC LIMIT 1),
        'val_loss', (SELECT v.val_loss FROM job_val_losses(j.id) v ORDER BY v.step DESC LIMIT 1),
        'val_losses', (SELECT coalesce(json_agg(json_build_array(v.step, v.val_loss) ORDER BY v.step), '[]')
          FROM job_val_losses(j.id) v),
        'losses', (SELECT coalesce(json_agg(json_build_array(h.step, h.loss) ORDER BY h.step), '[]')
          FROM (SELECT s.step, avg(s.loss) AS loss FROM job_steps s
            WHERE s.job_id = j.id AND s.stage = j.stages - 1 AND s.loss IS NOT NULL
              AND s.step > t.step - 10000
            GROUP BY s.step ORDER BY s.step DESC LIMIT 10000) h))
      FROM (SELECT s.step, avg(s.loss) FILTER (WHERE s.stage = j.stages - 1) AS loss,
          avg(s.iteration_s) AS iteration_s, max(s.reported_at) AS reported_at
        FROM job_steps s WHERE s.job_id = j.id
          AND s.step = (SELECT max(m.step) FROM job_steps m WHERE m.job_id = j.id)
        GROUP BY s.step) t))
    || (SELECT jsonb_build_object(
      'measured', coalesce(json_agg(json_build_object('stage', w.stage, 'replica', w.replica,
          'node_id', w.node_id, 'steps', w.steps, 'last_step', w.last_step,
          'iteration_s', w.iteration_s, 'compute_s', w.compute_s, 'send_s', w.send_s,
          'recv_wait_s', w.recv_wait_s, 'allreduce_s', w.allreduce_s, 'bubble_s', w.bubble_s,
          'tokens', w.tokens, 'stage_link_bytes', w.stage_link_bytes, 'sync_bytes', w.sync_bytes,
          'predicted_compute_s', w.predicted_compute_s, 'slowdown', w.slowdown,
          'straggler', w.straggler) ORDER BY w.stage, w.replica), '[]'),
      'stragglers', coalesce(json_agg(json_build_object('stage', w.stage, 'replica', w.replica,
          'node_id', w.node_id, 'slowdown', w.slowdown) ORDER BY w.stage, w.replica)
        FILTER (WHERE w.straggler), '[]'))
      FROM job_tasklets_measured(j.id) w))::json
  FROM jobs j WHERE j.id = p_job
$$;
