-- 017_read_models.sql: the JSON documents the API answers with, and the
-- rules they show, as functions in the database, so that a handler runs
-- one SELECT and an answer's shape can be tried in psql:
--
--   SELECT job_detail_json(1);                    -- GET /v1/jobs/1
--   SELECT node_view_json(n) FROM nodes n;        -- GET /v1/nodes
--   SELECT * FROM job_tasklets_measured(1);       -- its stragglers
--   SELECT links_matrix_json();                   -- GET /v1/links
--
-- Every function is STABLE and reads only; a later change to one is a new
-- migration with CREATE OR REPLACE.  Applied once, in a transaction, by
-- shoal-server at start-up.

-- A node as the API shows it; the token hash never leaves the database.
-- "reachable": {from_server (true, false, or null before its current
-- address was checked: 016_reachability.sql), why (null unless false),
-- checked_at}.
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

-- A node as operators list it: node_json plus its role, the tasklet it
-- holds in the current plan of a live job ({job_id, job_name, job_state,
-- epoch, stage, replica}) or null, by the rule the agent's assignment
-- follows (server/jobs/assignment.c: should two live plans claim it, the
-- newer job).
CREATE OR REPLACE FUNCTION node_view_json(n nodes) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT (node_json(n)::jsonb || jsonb_build_object('role', (SELECT json_build_object('job_id', j.id,
      'job_name', j.name, 'job_state', j.state, 'epoch', j.plan_epoch, 'stage', a.stage, 'replica', a.replica)
    FROM assignments a JOIN plans p ON p.id = a.plan_id
    JOIN jobs j ON j.id = p.job_id AND j.plan_epoch = p.epoch
    WHERE a.node_id = n.id AND j.state IN ('scheduled', 'running', 'recovering')
    ORDER BY j.id DESC LIMIT 1)))::json
$$;

-- A job as the API lists it.  latest_step: the steps the job has trained,
-- counted as checkpoints and `sample --step` count them (the highest step
-- index any tasklet reported, plus one), or null before the first report.
CREATE OR REPLACE FUNCTION job_json(j jobs) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object('id', j.id, 'name', j.name, 'state', j.state, 'spec', j.spec,
    'plan_epoch', j.plan_epoch, 'created_at', j.created_at, 'updated_at', j.updated_at,
    'started_at', j.started_at, 'finished_at', j.finished_at, 'failure_reason', j.failure_reason,
    'recoveries', j.recoveries, 'recovery_reason', j.recovery_reason, 'recovery_waiting', j.recovery_waiting,
    'schedule_refused', j.schedule_refused, 'checkpoint_failures', j.checkpoint_failures,
    'checkpoint_error', j.checkpoint_error,
    'dataset', json_build_object('data_sha256', j.data_sha256, 'validation_sha256', j.val_sha256),
    'latest_step', (SELECT max(ls.step) + 1 FROM job_steps ls WHERE ls.job_id = j.id))
$$;

-- The latest link matrix over every node in the fleet: row i is from
-- nodes[i], column j to nodes[j]; null where never measured.  "reachable":
-- whether i's agent could connect to j's peer port when it last tried
-- (true, false, or null: never tried, or i = j).  GET /v1/links answers
-- with it, and the planner prices links from it.
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

-- ---- the faults rule (server/jobs/fault_judge.h)

-- The node job p_job's failed links point to: the node cut off from its
-- peers though not from the server fails with whoever it is planned
-- beside.  Nodes rank by the failed epochs they have link reports in, then
-- by the reports their being cut off leaves unexplained (a report is
-- explained by X when X reported it, is named in it, or is where the
-- waits of that epoch lead from the neighbour named), then by the distinct
-- peers they share reports with, then by the peers that named them.  The
-- one node on top, alone and in reports of two epochs, is the suspect; a
-- tie suspects nobody (tests/unit/test_fault_judge.c replays such runs).
CREATE OR REPLACE FUNCTION job_link_suspect(p_job bigint) RETURNS TABLE (node_id bigint, epochs bigint)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE lr AS (SELECT DISTINCT f.epoch, f.reporter_node AS r, f.suspect_node AS s FROM job_faults f
      WHERE f.job_id = p_job AND f.verdict = 'link' AND f.reporter_node IS NOT NULL
        AND f.suspect_node IS NOT NULL),
    waits AS (SELECT lr.epoch, lr.r AS a, lr.s AS b FROM lr
      UNION SELECT x.epoch, x.a, lr.s FROM waits x JOIN lr ON lr.epoch = x.epoch AND lr.r = x.b),
    per_epoch AS (SELECT w.node_id, w.epoch, count(DISTINCT w.peer) AS peers,
        count(DISTINCT w.peer) FILTER (WHERE w.named) AS namers
      FROM (SELECT lr.s AS node_id, lr.r AS peer, lr.epoch, true AS named FROM lr
        UNION ALL SELECT lr.r, lr.s, lr.epoch, false FROM lr) w GROUP BY w.node_id, w.epoch),
    scored AS (SELECT p.node_id, count(*) AS epochs, sum(p.peers) AS peers, sum(p.namers) AS namers,
        (SELECT count(*) FROM lr WHERE p.node_id NOT IN (lr.r, lr.s) AND NOT EXISTS (SELECT 1 FROM waits x
          WHERE x.epoch = lr.epoch AND x.a = lr.s AND x.b = p.node_id)) AS unexplained
      FROM per_epoch p GROUP BY p.node_id),
    ranked AS (SELECT c.node_id, c.epochs,
        rank() OVER (ORDER BY c.epochs DESC, c.unexplained, c.peers DESC, c.namers DESC) AS pos,
        count(*) OVER (PARTITION BY c.epochs, c.unexplained, c.peers, c.namers) AS tied FROM scored c)
  SELECT ranked.node_id, ranked.epochs FROM ranked WHERE ranked.pos = 1 AND ranked.tied = 1 AND ranked.epochs >= 2
$$;

-- The nodes left out of job p_job's plans: a culprit of a failure of epoch
-- p_epoch (the plan being recovered from), or of failures in two epochs,
-- or the node its failed links point to; with how many epochs each failed in.
CREATE OR REPLACE FUNCTION job_excluded_nodes(p_job bigint, p_epoch integer)
RETURNS TABLE (node_id bigint, epochs bigint) LANGUAGE sql STABLE AS $$
  SELECT x.node_id, max(x.epochs) FROM
    (SELECT f.culprit_node AS node_id, count(DISTINCT f.epoch) AS epochs FROM job_faults f
      WHERE f.job_id = p_job AND f.verdict = 'node' AND f.culprit_node IS NOT NULL GROUP BY f.culprit_node
      HAVING count(DISTINCT f.epoch) >= 2 OR bool_or(f.epoch = p_epoch)
     UNION ALL SELECT l.node_id, l.epochs FROM job_link_suspect(p_job) l) x
  GROUP BY x.node_id
$$;

-- The links job p_job avoids, as node pairs (a < b): blamed in epoch
-- p_epoch, or in two epochs.
CREATE OR REPLACE FUNCTION job_avoided_links(p_job bigint, p_epoch integer)
RETURNS TABLE (a bigint, b bigint) LANGUAGE sql STABLE AS $$
  SELECT least(f.reporter_node, f.suspect_node), greatest(f.reporter_node, f.suspect_node)
  FROM job_faults f WHERE f.job_id = p_job AND f.verdict = 'link'
    AND f.reporter_node IS NOT NULL AND f.suspect_node IS NOT NULL
  GROUP BY 1, 2 HAVING count(DISTINCT f.epoch) >= 2 OR bool_or(f.epoch = p_epoch)
$$;

-- ---- validation, traffic, measured tasklets

-- One row per step of job p_job whose validation every replica has
-- reported: the mean over every validation sequence, each replica's mean
-- weighed by the micro-batches it ran.  A job without validation has none.
CREATE OR REPLACE FUNCTION job_val_losses(p_job bigint) RETURNS TABLE (step bigint, val_loss double precision)
LANGUAGE sql STABLE AS $$
  SELECT s.step, sum(s.val_loss * s.val_micro_batches) / sum(s.val_micro_batches)
  FROM jobs j JOIN job_steps s ON s.job_id = j.id
  WHERE j.id = p_job AND s.stage = j.stages - 1 AND s.val_micro_batches IS NOT NULL
  GROUP BY j.id, s.step HAVING sum(s.val_micro_batches) >= (j.spec #>> '{validation,sequences}')::int
    / (j.spec #>> '{parallelism,micro_batch_size}')::int
$$;

-- Bytes job p_job's tasklets sent per step, over every step reported with
-- byte counts (summed over tasklets): on pipeline links (activations and
-- their gradients, the global norm) and to the data-parallel groups
-- (every_step: gradients each step; diloco: the outer steps'
-- pseudo-gradients, averaged over every step).
CREATE OR REPLACE FUNCTION job_traffic(p_job bigint) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object('steps', count(DISTINCT s.step),
    'stage_link_bytes_per_step', round(sum(s.stage_link_bytes) / nullif(count(DISTINCT s.step), 0))::bigint,
    'sync_bytes_per_step', round(sum(s.sync_bytes) / nullif(count(DISTINCT s.step), 0))::bigint)
  FROM job_steps s WHERE s.job_id = p_job AND s.stage_link_bytes IS NOT NULL
$$;

-- One row per tasklet that reported in job p_job's current plan epoch,
-- with its medians over the epoch's latest 20 steps (seconds and tokens
-- per step; medians, so one slow step does not move them), the mean bytes
-- per step it sent on stage links and to its group, node_id (that of its
-- latest report), predicted_compute_s (below; null if the plan lacks the
-- tasklet), slowdown (compute_s over predicted_compute_s once the tasklet
-- has 3 reports: the first steps allocate and warm caches) and straggler
-- (slowdown above 2.0 times the median of the job's slowdowns: relative to
-- the job, so a fleet uniformly slower than it registered flags nobody;
-- one tasklet is never flagged, nor either of two).
--
-- predicted_compute_s is the shoal cost model's own terms (server/sched/
-- cost.c: ctx_init's FLOP and parameter counts, shoal_cost's per-stage
-- compute `flops / (tflops * 1e12)` per micro-batch and its AdamW term, 12
-- FLOP per parameter at 5% of the measured rate); change both together:
--   (M * B*T * (layers * layer_flops + is_last * last_flops)
--    + 12 * params / 0.05) / (tflops * 1e12)
-- with params = layers * layer_params + is_first * first_params
--               + is_last * last_params, the model's counts from the job's
-- model_costs.  tests/integration/test_stragglers.sh checks it against
-- the plan's breakdown, which the C model computed.
CREATE OR REPLACE FUNCTION job_tasklets_measured(p_job bigint) RETURNS TABLE (
    stage integer, replica integer, node_id bigint, steps bigint, last_step bigint,
    iteration_s double precision, compute_s double precision, send_s double precision,
    recv_wait_s double precision, allreduce_s double precision, bubble_s double precision,
    tokens double precision, stage_link_bytes double precision, sync_bytes double precision,
    predicted_compute_s double precision, slowdown double precision, straggler boolean)
LANGUAGE sql STABLE AS $$
  WITH j AS (SELECT * FROM jobs WHERE id = p_job),
    w AS (SELECT s.stage, s.replica, (array_agg(s.node_id ORDER BY s.step DESC))[1] AS node_id,
        count(*) AS steps, max(s.step) AS last_step,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.iteration_s) AS iteration_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.compute_s) AS compute_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.send_s) AS send_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.recv_wait_s) AS recv_wait_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.allreduce_s) AS allreduce_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.bubble_s) AS bubble_s,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY s.tokens) AS tokens,
        avg(s.stage_link_bytes)::float8 AS stage_link_bytes, avg(s.sync_bytes)::float8 AS sync_bytes
      FROM j JOIN job_steps s ON s.job_id = j.id AND s.epoch = j.plan_epoch
      WHERE s.step > (SELECT max(m.step) FROM job_steps m WHERE m.job_id = j.id AND m.epoch = j.plan_epoch) - 20
      GROUP BY s.stage, s.replica),
    p AS (SELECT w.*, (SELECT (k.mb * k.tok * (k.layers * (k.c->>'layer_flops')::float8
            + k.is_last * (k.c->>'last_flops')::float8)
          + 12.0 * (k.layers * (k.c->>'layer_params')::float8 + k.is_first * (k.c->>'first_params')::float8
            + k.is_last * (k.c->>'last_params')::float8) / 0.05) / (k.tflops * 1e12)
        FROM (SELECT j.model_costs AS c,
            (j.spec #>> '{parallelism,micro_batch_size}')::float8
              * (j.spec #>> '{model,context_length}')::float8 AS tok,
            (j.spec #>> '{parallelism,micro_batches}')::float8 AS mb,
            (a.layer_end - a.layer_start)::float8 AS layers, (a.stage = 0)::int AS is_first,
            (a.stage = j.stages - 1)::int AS is_last, n.tflops
          FROM j JOIN plans pl ON pl.job_id = j.id AND pl.epoch = j.plan_epoch
          JOIN assignments a ON a.plan_id = pl.id JOIN nodes n ON n.id = a.node_id
          WHERE a.stage = w.stage AND a.replica = w.replica) k) AS predicted_compute_s FROM w),
    r AS (SELECT p.*, CASE WHEN p.steps >= 3 THEN p.compute_s / nullif(p.predicted_compute_s, 0) END AS slowdown
      FROM p)
  SELECT r.stage, r.replica, r.node_id, r.steps, r.last_step, r.iteration_s, r.compute_s, r.send_s,
    r.recv_wait_s, r.allreduce_s, r.bubble_s, r.tokens, r.stage_link_bytes, r.sync_bytes,
    r.predicted_compute_s, r.slowdown, coalesce(r.slowdown > 2.0 * m.median AND m.median > 0, false)
  FROM r CROSS JOIN (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY r.slowdown) AS median FROM r) m
$$;

-- ---- a job's detail (GET /v1/jobs/{id})

-- job_json plus the current plan (its replicas and micro-batches are the
-- job's unless a re-plan short of nodes trains fewer replicas, each more
-- micro-batches), the traffic, the latest 20 failure reports as judged,
-- oldest first, the nodes left out of its next plan because of them, the
-- latest reported step with up to 10000 steps of loss history and the
-- validation losses, the measured summary per tasklet and the stragglers
-- among them.  NULL for a job that does not exist.
CREATE OR REPLACE FUNCTION job_detail_json(p_job bigint) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT (job_json(j)::jsonb || jsonb_build_object(
    'plan', (SELECT json_build_object('epoch', p.epoch, 'cost_model', p.cost_model,
        'predicted_iteration_s', p.predicted_iteration_s, 'created_at', p.created_at,
        'breakdown', p.detail->'breakdown', 'baselines', p.detail->'baselines',
        'predictions', p.detail->'predictions', 'forced', coalesce((p.detail->>'forced')::boolean, false),
        'replicas', p.replicas, 'micro_batches', p.micro_batches,
        'assignments', (SELECT coalesce(json_agg(json_build_object('stage', a.stage,
            'replica', a.replica, 'node_id', a.node_id, 'layer_start', a.layer_start,
            'layer_end', a.layer_end, 'dials_next', a.dials_next) ORDER BY a.stage, a.replica), '[]')
          FROM assignments a WHERE a.plan_id = p.id))
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
