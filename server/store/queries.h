/* queries.h - SQL that more than one handler runs, so that what the API
 * shows and what the scheduler reads are the same facts in the same shape. */
#ifndef SHOAL_QUERIES_H
#define SHOAL_QUERIES_H

#include "checkpoints.h"   /* CKPT_FILES_AT_SQL */

/* A node as the API shows it; the token hash never leaves the database.
 * NODE_FIELDS are its json_build_object arguments, for views that add some. */
#define NODE_FIELDS \
    "'id', id, 'name', name, 'peer_address', peer_address, 'region', region," \
    " 'state', state, 'hardware', json_build_object('gpu_model', gpu_model," \
    " 'gpu_memory_bytes', gpu_memory_bytes, 'gpu_count', gpu_count, 'tflops', tflops," \
    " 'cpu_cores', cpu_cores, 'ram_bytes', ram_bytes)," \
    " 'current_job_id', current_job_id, 'current_step', current_step," \
    " 'registered_at', registered_at, 'last_heartbeat_at', last_heartbeat_at"
#define NODE_JSON "json_build_object(" NODE_FIELDS ")"

/* The latest link matrix over every node: row i is from nodes[i], column j
 * to nodes[j]; null where never measured.  GET /v1/links answers with it. */
#define LINKS_MATRIX_SQL \
    "WITH ids AS (SELECT id FROM nodes WHERE removed_at IS NULL)," \
    " ll AS MATERIALIZED (SELECT * FROM links_latest)," \
    " cells AS (SELECT a.id AS a, b.id AS b, ll.latency_ms, ll.bandwidth_gbps, ll.measured_at" \
    "   FROM ids a CROSS JOIN ids b" \
    "   LEFT JOIN ll ON ll.from_node = a.id AND ll.to_node = b.id)," \
    " rows AS (SELECT a, json_agg(latency_ms ORDER BY b) AS lat," \
    "   json_agg(bandwidth_gbps ORDER BY b) AS bw, json_agg(measured_at ORDER BY b) AS at" \
    "   FROM cells GROUP BY a)" \
    " SELECT json_build_object(" \
    "  'nodes', (SELECT coalesce(json_agg(id ORDER BY id), '[]') FROM ids)," \
    "  'latency_ms', (SELECT coalesce(json_agg(lat ORDER BY a), '[]') FROM rows)," \
    "  'bandwidth_gbps', (SELECT coalesce(json_agg(bw ORDER BY a), '[]') FROM rows)," \
    "  'measured_at', (SELECT coalesce(json_agg(at ORDER BY a), '[]') FROM rows))"

/* True when step `step` of job `job` is whole: every tasklet of the epoch
 * that trained it (stages x that plan's replicas: a re-plan short of nodes
 * may train fewer, planner.h) reported it.  The arguments are SQL
 * expressions. */
/* True when job `job` (an SQL expression not naming an alias j) has stored its final checkpoint
 * (step total_steps) whole: CKPT_FILES_AT_SQL files a stage.  A job
 * succeeds once this holds and every tasklet of its current epoch has
 * reported its last step, whichever comes second (h_progress.c,
 * h_checkpoints.c). */
#define JOB_FINAL_STORED_SQL(job) \
    "coalesce((SELECT count(*) >= j.stages * " CKPT_FILES_AT_SQL("j.total_steps") " FROM jobs j" \
    "   JOIN checkpoints c ON c.job_id = j.id AND c.step = j.total_steps AND c.stage < j.stages" \
    "     AND c.replica < " CKPT_FILES_AT_SQL("j.total_steps") \
    "   WHERE j.id = " job " GROUP BY j.id), false)"

/* The tasklets of job row `j`'s current plan epoch (stages x its replicas). */
#define JOB_TASKLETS_SQL(j) \
    "(" j ".stages * (SELECT p.replicas FROM plans p WHERE p.job_id = " j ".id AND p.epoch = " j ".plan_epoch))"

/* True when live job row `r` (an alias other than j) is done: every
 * tasklet of its epoch reported its last step (or it was re-planned at its
 * last step, planner.c), and its final checkpoint is stored
 * (checkpoints_job_done, and the recovery thread's sweep). */
#define JOB_DONE_WHERE_SQL(r) \
    r ".state IN ('scheduled', 'running') AND " r ".tasklets_finished >= " JOB_TASKLETS_SQL(r) \
    " AND " JOB_FINAL_STORED_SQL(r ".id")

/* True when node `node` (an SQL expression) has held a tasklet of job row
 * `j` in any of its epochs.  A node's routes find a job only when it is
 * one of the job's: to any other node the job does not exist, and its
 * answers say nothing of its state, shape or epoch. */
#define JOB_MEMBER_SQL(j, node) \
    "EXISTS (SELECT 1 FROM plans mp JOIN assignments ma ON ma.plan_id = mp.id" \
    " WHERE mp.job_id = " j ".id AND ma.node_id = " node ")"

#define STEP_WHOLE_SQL(job, step) \
    "(SELECT count(*) >= coalesce(max(sj.stages * sp.replicas), 1) FROM job_steps ss" \
    " JOIN plans sp ON sp.job_id = ss.job_id AND sp.epoch = ss.epoch JOIN jobs sj ON sj.id = ss.job_id" \
    " WHERE ss.job_id = " job " AND ss.step = " step ")"

/* The loss that replica `replica`'s last stage (`stage`) passed round the
 * ring at step `step` of epoch `epoch` before the all-reduce: the next
 * replica's report carries it (ring_prev_loss).  A scalar subquery, NULL
 * when no such report has it.  The arguments are SQL expressions. */
#define PASSED_LOSS_SQL(job, step, stage, replica, replicas, epoch) \
    "(SELECT x.ring_prev_loss FROM job_steps x WHERE x.job_id = " job " AND x.step = " step \
    " AND x.stage = " stage " AND x.replica = (" replica " + 1) % " replicas " AND x.epoch = " epoch ")"

/* The SET list of an UPDATE of jobs that sends a live job to recovery:
 * 'recovering' because of `reason`, re-planned once `after` has passed, or
 * 'failed' when it has been re-planned `max` times already.  The arguments
 * are SQL expressions (parameters, columns). */
#define JOB_RECOVER_SET(reason, max, after) \
    " state = CASE WHEN recoveries >= " max " THEN 'failed' ELSE 'recovering' END," \
    " failure_reason = CASE WHEN recoveries >= " max \
    "   THEN " reason " || ' (after ' || recoveries || ' recoveries)' END," \
    " finished_at = CASE WHEN recoveries >= " max " THEN now() END," \
    " recovery_reason = " reason ", recovery_waiting = NULL, recover_after = " after "," \
    " recovery_started_at = now(), recovery_moved = false," \
    " recoveries = recoveries + (recoveries < " max ")::int, updated_at = now()"

/* The SET list of an UPDATE of jobs that moves a live job off a node that
 * stays alive (a drain): 'recovering' because of `reason`, re-planned at
 * once, from the survivors' memory where it can (live_resume.h); nothing
 * failed, so no recovery is counted (015_drain_moves.sql). */
#define JOB_MOVE_SET(reason) \
    " state = 'recovering', recovery_reason = " reason ", recovery_waiting = NULL, recover_after = now()," \
    " recovery_started_at = now(), recovery_moved = true, updated_at = now()"

/* True when job `j` of current plan `p` still needs the node at its
 * assignment `a`: it trains, or that place's part of its final checkpoint
 * is still to be stored (a trained job waits for it). */
#define JOB_NEEDS_PLACE_SQL(j, p, a) \
    "(" j ".tasklets_finished < " j ".stages * " p ".replicas" \
    " OR (" a ".replica < " CKPT_FILES_AT_SQL(j ".total_steps") " AND NOT EXISTS (SELECT 1 FROM checkpoints c" \
    "   WHERE c.job_id = " j ".id AND c.step = " j ".total_steps AND c.stage = " a ".stage" \
    "   AND c.replica = " a ".replica)))"

/* ---- failures judged (sql/008_fault_attribution.sql, recovery.c) */

/* The node that failed links of job `job` point to.  A link-verdict
 * report (both ends answered the server) says its reporter waited on the
 * neighbour it names.  The node cut off from its peers (though not from
 * the server) fails with whoever it is planned beside, so it has such
 * reports in every failed epoch; a healthy node has them only in the
 * epochs it was planned next to the cut node or to one that waited on it,
 * and the links blamed are avoided after the first failure
 * (JOB_AVOIDED_LINKS_SQL).  So nodes rank first by the failed epochs they
 * have link reports in.  Then by the reports their being cut off leaves
 * unexplained: a report is explained by node X when X reported it, is
 * named in it, or is where the waits reported in that epoch lead from
 * the neighbour named (it waited on X, or on one that did, ...).  Then by
 * the distinct peers they share reports with (as reporter or as the
 * neighbour named), summed over epochs, then by the peers that named
 * them, summed the same way: every live neighbour of the cut node names
 * it, while a healthy node is named by the cut node and by those that
 * gave up after it.  Who reported first is no evidence: the cut node
 * often times out first and names its neighbour.  The one node on top,
 * alone and in reports of two epochs, is taken for the cut node; a tie
 * excludes nobody: the next failure tells more.  (Ranked by peers alone,
 * a neighbour that the cut node and one that gave up after it both named
 * in one epoch tied the cut node, with one peer in each of two epochs,
 * and a third failure was needed: tests/unit/test_fault_judge.c replays
 * such runs.)  A subquery (node_id, epochs). */
#define JOB_LINK_SUSPECT_SQL(job) \
    "(WITH RECURSIVE lr AS (SELECT DISTINCT f.epoch, f.reporter_node AS r, f.suspect_node AS s FROM job_faults f" \
    "   WHERE f.job_id = " job " AND f.verdict = 'link' AND f.reporter_node IS NOT NULL" \
    "     AND f.suspect_node IS NOT NULL)," \
    " waits AS (SELECT lr.epoch, lr.r AS a, lr.s AS b FROM lr" \
    "   UNION SELECT x.epoch, x.a, lr.s FROM waits x JOIN lr ON lr.epoch = x.epoch AND lr.r = x.b)," \
    " per_epoch AS (SELECT w.node_id, w.epoch, count(DISTINCT w.peer) AS peers," \
    "   count(DISTINCT w.peer) FILTER (WHERE w.named) AS namers" \
    "   FROM (SELECT lr.s AS node_id, lr.r AS peer, lr.epoch, true AS named FROM lr" \
    "     UNION ALL SELECT lr.r, lr.s, lr.epoch, false FROM lr) w GROUP BY w.node_id, w.epoch)," \
    " scored AS (SELECT p.node_id, count(*) AS epochs, sum(p.peers) AS peers, sum(p.namers) AS namers," \
    "   (SELECT count(*) FROM lr WHERE p.node_id NOT IN (lr.r, lr.s) AND NOT EXISTS (SELECT 1 FROM waits x" \
    "     WHERE x.epoch = lr.epoch AND x.a = lr.s AND x.b = p.node_id)) AS unexplained" \
    "   FROM per_epoch p GROUP BY p.node_id)," \
    " ranked AS (SELECT c.node_id, c.epochs," \
    "   rank() OVER (ORDER BY c.epochs DESC, c.unexplained, c.peers DESC, c.namers DESC) AS pos," \
    "   count(*) OVER (PARTITION BY c.epochs, c.unexplained, c.peers, c.namers) AS tied FROM scored c)" \
    " SELECT ranked.node_id, ranked.epochs FROM ranked" \
    " WHERE ranked.pos = 1 AND ranked.tied = 1 AND ranked.epochs >= 2)"

/* The nodes left out of job `job`'s plans (SQL expressions, e.g. "$1" and
 * a subquery for its epoch): a culprit of a failure of epoch `epoch` (the
 * plan being recovered from), or of failures in two epochs, or the node
 * its failed links point to (JOB_LINK_SUSPECT_SQL).  A subquery of node
 * ids (never NULL), with how many epochs each failed in. */
#define JOB_EXCLUDED_SQL(job, epoch) \
    "(SELECT x.node_id, max(x.epochs) AS epochs FROM" \
    "  (SELECT f.culprit_node AS node_id, count(DISTINCT f.epoch) AS epochs FROM job_faults f" \
    "    WHERE f.job_id = " job " AND f.verdict = 'node' AND f.culprit_node IS NOT NULL GROUP BY f.culprit_node" \
    "    HAVING count(DISTINCT f.epoch) >= 2 OR bool_or(f.epoch = " epoch ")" \
    "   UNION ALL SELECT l.node_id, l.epochs FROM " JOB_LINK_SUSPECT_SQL(job) " l) x" \
    "  GROUP BY x.node_id)"
/* The same for links, a subquery of node pairs (a < b). */
#define JOB_AVOIDED_LINKS_SQL(job, epoch) \
    "(SELECT least(f.reporter_node, f.suspect_node) AS a, greatest(f.reporter_node, f.suspect_node) AS b" \
    "  FROM job_faults f WHERE f.job_id = " job " AND f.verdict = 'link'" \
    "   AND f.reporter_node IS NOT NULL AND f.suspect_node IS NOT NULL" \
    "  GROUP BY 1, 2 HAVING count(DISTINCT f.epoch) >= 2 OR bool_or(f.epoch = " epoch "))"

/* ---- validation and traffic (agent/train/eval.h, agent/train/sync.h) */

/* A subquery over the jobs row aliased `j` (a C string literal naming it):
 * one row (step, val_loss) per step whose validation every replica has
 * reported: the mean over every validation sequence, each replica's mean
 * weighed by the micro-batches it ran.  A job without validation has none. */
#define VAL_LOSSES_SQL(j) \
    "(SELECT s.step, sum(s.val_loss * s.val_micro_batches) / sum(s.val_micro_batches) AS val_loss" \
    " FROM job_steps s WHERE s.job_id = " j ".id AND s.stage = " j ".stages - 1" \
    "   AND s.val_micro_batches IS NOT NULL" \
    " GROUP BY s.step HAVING sum(s.val_micro_batches) >= (" j ".spec #>> '{validation,sequences}')::int" \
    "   / (" j ".spec #>> '{parallelism,micro_batch_size}')::int)"

/* Bytes the job's tasklets sent per step, over every step reported with
 * byte counts (all of them, summed over tasklets): on pipeline links
 * (activations and their gradients, the global norm) and to the data-
 * parallel groups (every_step: gradients each step; diloco: the outer
 * steps' pseudo-gradients, averaged over every step).  A json object over
 * the jobs row `j`. */
#define JOB_TRAFFIC_SQL(j) \
    "(SELECT json_build_object('steps', count(DISTINCT s.step)," \
    "   'stage_link_bytes_per_step', round(sum(s.stage_link_bytes) / nullif(count(DISTINCT s.step), 0))::bigint," \
    "   'sync_bytes_per_step', round(sum(s.sync_bytes) / nullif(count(DISTINCT s.step), 0))::bigint)" \
    " FROM job_steps s WHERE s.job_id = " j ".id AND s.stage_link_bytes IS NOT NULL)"

/* ---- a job's measured tasklets and its stragglers (README.md, Recovery) */

/* Steps per tasklet a measured summary covers: the current plan epoch's
 * latest ones (those within that many of the epoch's highest step). */
#define MEASURED_WINDOW_TEXT "20"
/* STRAGGLER_FACTOR: a tasklet straggles when its slowdown (median measured
 * compute_s over its predicted compute time) exceeds this many times the
 * median slowdown of its job's tasklets.  Relative to the job, so a fleet
 * uniformly slower than the TFLOP/s it measured at registration (CPU agents
 * sharing cores, clocks throttled alike) flags nobody.  2: the plan sized
 * the tasklet's work to its node's speed and it takes twice its peers'
 * pace.  Healthy tasklets came within 1.8x of their job's median with four
 * CPU agents sharing two cores (contention, and FLOP counts that fit a tiny
 * model's stages unevenly); real models on GPUs stay far closer.  Text:
 * it goes into SQL. */
#define STRAGGLER_FACTOR_TEXT "2.0"
/* Reports a tasklet needs in the window before its slowdown counts (the
 * first steps allocate and warm caches). */
#define STRAGGLER_MIN_STEPS_TEXT "3"

/* Predicted compute seconds per step of one tasklet: the shoal cost
 * model's own terms, repeated here in SQL so that the straggler rule can be
 * one query; change both together (server/sched/cost.c: ctx_init's FLOP and
 * parameter counts, shoal_cost's per-stage compute `flops / (tflops * 1e12)`
 * per micro-batch, and its AdamW term, OPT_FLOP_PER_PARAM = 12 FLOP per
 * parameter at OPT_EFFICIENCY = 5% of the measured rate).  The agents'
 * compute_s covers forward, backward and the optimizer step, so this is
 *   (M * B*T * (layers * layer_flops + is_last * last_flops)
 *    + 12 * params / 0.05) / (tflops * 1e12)
 * with params = layers * layer_params + is_first * first_params
 *               + is_last * last_params,
 * the model's counts from the jobs row's model_costs (the family's row in
 * common/model.c, jobspec_model_costs; GPT-2's layer_flops is
 * 72 C^2 + 6 C T a token).  An expression over columns k (model_costs),
 * tok (B*T), mb (M), layers, is_first, is_last (0 or 1) and tflops;
 * tests/integration/test_stragglers.sh checks it against the plan's
 * breakdown, which the C model computed. */
#define TASKLET_PREDICTED_COMPUTE_S_SQL \
    "((mb * tok * (layers * (k->>'layer_flops')::float8 + is_last * (k->>'last_flops')::float8)" \
    " + 12.0 * (layers * (k->>'layer_params')::float8 + is_first * (k->>'first_params')::float8" \
    "   + is_last * (k->>'last_params')::float8) / 0.05)" \
    " / (tflops * 1e12))"

/* A subquery over the jobs row `j` of the enclosing query (use it in a
 * scalar subquery, or after LATERAL): one row per tasklet that reported in
 * the job's current plan epoch, with its medians over the epoch's latest
 * MEASURED_WINDOW steps (seconds per step, tokens per step; medians, so one
 * slow step, a checkpoint or a retry, does not move them), the mean bytes
 * per step it sent on stage links and to its group (means: diloco sends
 * only every inner_steps steps), node_id (the
 * node of its latest report), predicted_compute_s (above, for the plan's
 * node and layers; null if the plan lacks the tasklet), slowdown (compute_s
 * over predicted_compute_s once the tasklet has STRAGGLER_MIN_STEPS
 * reports, else null) and straggler (slowdown above STRAGGLER_FACTOR times
 * the median of the job's slowdowns).  The median is the pace of the job's
 * majority: one tasklet is never flagged, nor either of two (their median
 * is their mean, which neither exceeds twice); from three on, one far off
 * its peers is.  (The lower median would flag the slower of two, but it
 * also flagged a healthy tasklet of a 2x2 job of CPU agents sharing two
 * cores, where the FLOP count fits some stages worse than others.) */
#define TASKLET_MEASURED_SQL \
    "(WITH w AS (SELECT s.stage, s.replica, (array_agg(s.node_id ORDER BY s.step DESC))[1] AS node_id," \
    "   count(*) AS steps, max(s.step) AS last_step," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.iteration_s) AS iteration_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.compute_s) AS compute_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.send_s) AS send_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.recv_wait_s) AS recv_wait_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.allreduce_s) AS allreduce_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.bubble_s) AS bubble_s," \
    "   percentile_cont(0.5) WITHIN GROUP (ORDER BY s.tokens) AS tokens," \
    "   avg(s.stage_link_bytes)::float8 AS stage_link_bytes, avg(s.sync_bytes)::float8 AS sync_bytes" \
    "   FROM job_steps s WHERE s.job_id = j.id AND s.epoch = j.plan_epoch" \
    "     AND s.step > (SELECT max(m.step) FROM job_steps m WHERE m.job_id = j.id" \
    "       AND m.epoch = j.plan_epoch) - " MEASURED_WINDOW_TEXT \
    "   GROUP BY s.stage, s.replica)," \
    " p AS (SELECT w.*, (SELECT " TASKLET_PREDICTED_COMPUTE_S_SQL \
    "     FROM (SELECT j.model_costs AS k," \
    "       (j.spec #>> '{parallelism,micro_batch_size}')::float8" \
    "         * (j.spec #>> '{model,context_length}')::float8 AS tok," \
    "       (j.spec #>> '{parallelism,micro_batches}')::float8 AS mb," \
    "       (a.layer_end - a.layer_start)::float8 AS layers, (a.stage = 0)::int AS is_first," \
    "       (a.stage = j.stages - 1)::int AS is_last, n.tflops" \
    "       FROM plans pl JOIN assignments a ON a.plan_id = pl.id JOIN nodes n ON n.id = a.node_id" \
    "       WHERE pl.job_id = j.id AND pl.epoch = j.plan_epoch" \
    "         AND a.stage = w.stage AND a.replica = w.replica) k) AS predicted_compute_s FROM w)," \
    " r AS (SELECT p.*, CASE WHEN p.steps >= " STRAGGLER_MIN_STEPS_TEXT \
    "   THEN p.compute_s / nullif(p.predicted_compute_s, 0) END AS slowdown FROM p)" \
    " SELECT r.*, coalesce(r.slowdown > " STRAGGLER_FACTOR_TEXT " * m.median AND m.median > 0, false) AS straggler" \
    " FROM r CROSS JOIN (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY r.slowdown) AS median FROM r) m)"

#endif
