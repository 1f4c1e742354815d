/* h_metrics.c - GET /metrics: the Prometheus text exposition (0.0.4).
 *
 * Two sources.  What this process counts in memory (HTTP requests,
 * scheduler runs: metrics.c; its pool, long-polls and listener) describes
 * this server only.  What the database knows (nodes, jobs, links) is read
 * at scrape time, so every server on one database reports the same fleet.
 *
 * Label sets are bounded:
 * - per node (node id and name): only nodes heard from within
 *   METRICS_NODE_HORIZON_S.  Node rows are never deleted (a drained node is
 *   kept, and an agent that registers again is a new node), so without the
 *   horizon every node ever seen would stay a series for good; a node that
 *   falls silent still shows its growing heartbeat age for a day, and the
 *   shoal_nodes totals count every row.
 * - per link (from, to: node ids): N^2 by design, between the nodes above.
 *   About 150 bytes a measured pair, so the 16 MiB body cap holds roughly
 *   330 fully measured nodes; past that the link families are left out
 *   (with a warning in the log) rather than failing the whole scrape.
 * - per job (job_id): only live jobs (running, recovering) with reported
 *   steps.  The label is job_id, not job: Prometheus sets `job` on every
 *   series it scrapes (the scrape job's name) and would rename ours to
 *   exported_job.
 * - per tasklet (job_id, stage, replica, node): the tasklets of live jobs whose
 *   slowdown is measured (job_tasklets_measured, sql/017_read_models.sql), so at most
 *   stages x replicas series a live job, as many as it has tasklets. */
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../http/http.h"
#include "../jobs/relay_check.h"
#include "../http/http_limits.h"
#include "../jobs/longpoll.h"
#include "../http/prom.h"
#include "routes.h"
#include "../http/workq.h"
#include "../store/db.h"
#include "../http/metrics.h"

#define METRICS_NODE_HORIZON_S 86400.0   /* s: nodes silent longer have no per-node or link series */
#define BYTES_PER_GBIT 1.25e8           /* the database keeps bandwidth in Gbit/s; 1e9 bits / 8 */
#define MS_PER_SECOND 1e3                /* and latency in ms */

/* What the renderers below return besides 0. */
#define METRICS_DB_FAILED (-1)   /* a query failed: shoal_database_up 0, the scrape goes on */
#define METRICS_FULL (-2)        /* the body cap was reached: the output is cut mid-family */

/* Writes one gauge family whose samples come from a query returning
 * (label value, count) rows.  Returns 0, METRICS_DB_FAILED or METRICS_FULL. */
static int h_metrics_by_state(PGconn *c, struct buf *out, const char *name, const char *label,
                              const char *help, const char *sql)
{
    struct shoal_err e;
    int rc = METRICS_FULL;
    PGresult *r = db_exec(c, sql, 0, NULL, &e);
    if (!r)
        return METRICS_DB_FAILED;
    if (prom_family(out, name, "gauge", help) != 0)
        goto out;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *labels[] = { label, PQgetvalue(r, i, 0), NULL };
        if (prom_sample(out, name, labels, strtod(PQgetvalue(r, i, 1), NULL)) != 0)
            goto out;
    }
    rc = 0;
out:
    PQclear(r);
    return rc;
}

/* $1 heartbeat timeout (s), $2 horizon (s).  One row per node heard from
 * within the horizon: id, name, state, heartbeat age (s), and 1 if the node
 * is live by the scheduler's rule (idle or busy, heartbeat within the
 * timeout; see LIVE_NODES_SQL in h_schedule.c), else 0.  Nothing marks a
 * silent node 'lost' by itself, so "up" is what tells a dead agent apart. */
#define NODE_GAUGES_SQL \
    "SELECT id, name, state, greatest(0, extract(epoch FROM now() - last_heartbeat_at))," \
    "  (state IN ('idle', 'busy') AND last_heartbeat_at > now() - make_interval(secs => $1::float8))::int," \
    "  CASE WHEN peer_checked_address = peer_address THEN peer_reachable::int END" \
    " FROM nodes WHERE removed_at IS NULL AND last_heartbeat_at > now() - make_interval(secs => $2::float8)" \
    " ORDER BY id"

/* Writes shoal_node_up, shoal_node_state (one-hot over every state, so a
 * node's state is one series per state that flips between 0 and 1),
 * shoal_node_heartbeat_age_seconds and shoal_node_reachable (nodes whose
 * current address was checked) from the rows of NODE_GAUGES_SQL.
 * Returns 0 or METRICS_FULL. */
static int h_metrics_node_rows(PGresult *r, struct buf *out)
{
    static const char *const states[] = { "idle", "busy", "draining", "lost" };
    int n = PQntuples(r);
    if (prom_family(out, "shoal_node_up", "gauge",
                    "1 if the node is idle or busy and its last heartbeat is within --heartbeat-timeout.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < n; i++) {
        const char *labels[] = { "node", PQgetvalue(r, i, 0), "name", PQgetvalue(r, i, 1), NULL };
        if (prom_sample(out, "shoal_node_up", labels, strtod(PQgetvalue(r, i, 4), NULL)) != 0)
            return METRICS_FULL;
    }
    if (prom_family(out, "shoal_node_state", "gauge",
                    "1 for the state the node is in (idle, busy, draining, lost), 0 for the others.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < n; i++) {
        for (size_t s = 0; s < sizeof states / sizeof states[0]; s++) {
            const char *labels[] = { "node", PQgetvalue(r, i, 0), "name", PQgetvalue(r, i, 1),
                                     "state", states[s], NULL };
            if (prom_sample(out, "shoal_node_state", labels, strcmp(PQgetvalue(r, i, 2), states[s]) == 0) != 0)
                return METRICS_FULL;
        }
    }
    if (prom_family(out, "shoal_node_heartbeat_age_seconds", "gauge",
                    "Seconds since the node's last heartbeat (or progress report), by the database's clock.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < n; i++) {
        const char *labels[] = { "node", PQgetvalue(r, i, 0), "name", PQgetvalue(r, i, 1), NULL };
        if (prom_sample(out, "shoal_node_heartbeat_age_seconds", labels, strtod(PQgetvalue(r, i, 3), NULL)) != 0)
            return METRICS_FULL;
    }
    if (prom_family(out, "shoal_node_reachable", "gauge",
                    "1 if the server reaches the node's peer port from outside, 0 if not (NAT, a firewall, a wrong "
                    "--advertise); no series before its current address is checked.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < n; i++) {
        if (PQgetisnull(r, i, 5))
            continue;
        const char *labels[] = { "node", PQgetvalue(r, i, 0), "name", PQgetvalue(r, i, 1), NULL };
        if (prom_sample(out, "shoal_node_reachable", labels, strtod(PQgetvalue(r, i, 5), NULL)) != 0)
            return METRICS_FULL;
    }
    return 0;
}

/* The per-node families.  Returns 0, METRICS_DB_FAILED or METRICS_FULL. */
static int h_metrics_nodes(PGconn *c, struct buf *out, long heartbeat_timeout)
{
    char p_timeout[32], p_horizon[32];
    struct shoal_err e;
    const char *params[] = { db_param_f64(p_timeout, (double)heartbeat_timeout),
                             db_param_f64(p_horizon, METRICS_NODE_HORIZON_S) };
    PGresult *r = db_exec(c, NODE_GAUGES_SQL, 2, params, &e);
    if (!r)
        return METRICS_DB_FAILED;
    int rc = h_metrics_node_rows(r, out);
    PQclear(r);
    return rc;
}

/* Per live job (running or recovering) with reported steps:
 *  1 the latest step;
 *  2 the mean iteration time of the latest step's rows (s);
 *  3 tokens per second of the latest complete step, the latest step every
 *    tasklet reported, searched among the last 16 (tokens summed over
 *    replicas, each replica's largest count over its stages, over the
 *    slowest iteration);
 *  4 the mean loss of the latest last-stage rows that have one;
 *  5 the validation loss of the latest step whose validation every replica
 *    reported (job_val_losses);
 *  6-11 the means over every tasklet of that same complete step of
 *    compute_s, send_s, recv_wait_s, bubble_s, allreduce_s and the rest of
 *    its iteration_s (s): what no other part covers (validation, checkpoint
 *    hand-off, data loading), never below 0.  The agents measure the five
 *    as disjoint parts of the iteration (docs/api.md, the step parts under
 *    /metrics), so the six add up to the mean iteration time of the step.  The complete step, not the
 *    latest: a step some stages have not reported yet would give a mean
 *    over whichever stages came first, and stages differ most in exactly
 *    these parts (the first waits, the last idles);
 *  12-13 bytes sent per step on stage links and to the data-parallel
 *    groups (job_traffic);
 *  14 checkpoint uploads the server's store failed (h_checkpoints.c).
 * A NULL cell (no complete step among the last 16, no loss yet) has no
 * sample. */
#define JOB_GAUGES_SQL \
    "WITH l AS (SELECT j.id, j.stages, j.replicas, j.spec, j.checkpoint_failures," \
    "   (SELECT max(s.step) FROM job_steps s WHERE s.job_id = j.id) AS step" \
    "   FROM jobs j WHERE j.state IN ('running', 'recovering'))," \
    " k AS (SELECT l.*, (SELECT c.step FROM job_steps c JOIN plans p ON p.job_id = c.job_id AND p.epoch = c.epoch" \
    "     WHERE c.job_id = l.id AND c.step > l.step - 16 GROUP BY c.step" \
    "     HAVING count(*) >= l.stages * max(p.replicas) ORDER BY c.step DESC LIMIT 1) AS complete" \
    "   FROM l WHERE l.step IS NOT NULL)" \
    " SELECT k.id, k.step," \
    "  (SELECT avg(s.iteration_s) FROM job_steps s WHERE s.job_id = k.id AND s.step = k.step)," \
    "  (SELECT sum(r.tok) / nullif(max(r.it), 0) FROM (SELECT max(s.tokens) AS tok, max(s.iteration_s) AS it" \
    "     FROM job_steps s WHERE s.job_id = k.id AND s.step = k.complete GROUP BY s.replica) r)," \
    "  (SELECT avg(s.loss) FROM job_steps s WHERE s.job_id = k.id AND s.stage = k.stages - 1" \
    "     AND s.step = (SELECT max(m.step) FROM job_steps m WHERE m.job_id = k.id" \
    "       AND m.stage = k.stages - 1 AND m.loss IS NOT NULL))," \
    "  (SELECT v.val_loss FROM job_val_losses(k.id) v ORDER BY v.step DESC LIMIT 1)," \
    "  b.compute, b.send, b.recv_wait, b.bubble, b.allreduce, b.other," \
    "  job_traffic(k.id)->>'stage_link_bytes_per_step', job_traffic(k.id)->>'sync_bytes_per_step'," \
    "  k.checkpoint_failures" \
    " FROM k LEFT JOIN LATERAL (SELECT avg(s.compute_s) AS compute, avg(s.send_s) AS send," \
    "   avg(s.recv_wait_s) AS recv_wait, avg(s.bubble_s) AS bubble, avg(s.allreduce_s) AS allreduce," \
    "   avg(greatest(0, s.iteration_s - s.compute_s - s.send_s - s.recv_wait_s - s.bubble_s - s.allreduce_s))" \
    "     AS other" \
    "   FROM job_steps s WHERE s.job_id = k.id AND s.step = k.complete) b ON true" \
    " ORDER BY k.id"
#define JOB_COL_PARTS 6   /* the first part's column */
#define JOB_COL_BYTES 12  /* stage link bytes, then sync bytes */
#define JOB_COL_CKPT_FAILURES 14

/* Writes the job gauges of columns 1-5 above, one family per column.
 * Returns 0 or METRICS_FULL. */
static int h_metrics_job_gauges(PGresult *r, struct buf *out)
{
    static const struct { const char *name, *help; } fam[] = {
        { "shoal_job_step", "Latest step a running job reported." },
        { "shoal_job_step_seconds", "Mean iteration time of the latest step's reports, seconds." },
        { "shoal_job_tokens_per_second", "Tokens of the latest complete step over its slowest iteration." },
        { "shoal_job_loss", "Mean training loss of the latest step the last stage reported." },
        { "shoal_job_validation_loss", "Mean loss over the job's validation sequences at its latest evaluation." },
    };
    for (int f = 0; f < 5; f++) {
        if (prom_family(out, fam[f].name, "gauge", fam[f].help) != 0)
            return METRICS_FULL;
        for (int i = 0; i < PQntuples(r); i++) {
            if (PQgetisnull(r, i, f + 1))
                continue;
            const char *labels[] = { "job_id", PQgetvalue(r, i, 0), NULL };
            if (prom_sample(out, fam[f].name, labels, strtod(PQgetvalue(r, i, f + 1), NULL)) != 0)
                return METRICS_FULL;
        }
    }
    return 0;
}

/* Writes shoal_job_step_part_seconds from columns 6-11 above.  One family
 * with a `part` label rather than a family per part: the parts divide one
 * whole, so sum without(part) is meaningful (the mean iteration time of the
 * step) and a stacked graph of a job's step is one query.  The part names
 * are the progress report's fields without "_s", and "other".  Returns 0
 * or METRICS_FULL. */
static int h_metrics_job_parts(PGresult *r, struct buf *out)
{
    static const char *const parts[] = { "compute", "send", "recv_wait", "bubble", "allreduce", "other" };
    if (prom_family(out, "shoal_job_step_part_seconds", "gauge",
                    "Mean time per tasklet in each part of the latest complete step (compute, send, "
                    "recv_wait, bubble, allreduce, other: disjoint, they add up to the step's mean "
                    "iteration time), seconds.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < PQntuples(r); i++) {
        for (int p = 0; p < (int)(sizeof parts / sizeof parts[0]); p++) {
            if (PQgetisnull(r, i, JOB_COL_PARTS + p))
                continue;
            const char *labels[] = { "job_id", PQgetvalue(r, i, 0), "part", parts[p], NULL };
            if (prom_sample(out, "shoal_job_step_part_seconds", labels,
                            strtod(PQgetvalue(r, i, JOB_COL_PARTS + p), NULL)) != 0)
                return METRICS_FULL;
        }
    }
    return 0;
}

/* Writes shoal_job_step_sent_bytes from columns 12-13 above, with a
 * `link` label: "stage" (pipeline links) and "sync" (the data-parallel
 * groups).  Returns 0 or METRICS_FULL. */
static int h_metrics_job_bytes(PGresult *r, struct buf *out)
{
    static const char *const links[] = { "stage", "sync" };
    if (prom_family(out, "shoal_job_step_sent_bytes", "gauge",
                    "Bytes the job's tasklets sent per step, on stage links (activations and their gradients) "
                    "and to their data-parallel groups (gradients, or DiLoCo's pseudo-gradients averaged over "
                    "the steps), over every step reported.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < PQntuples(r); i++) {
        for (int l = 0; l < 2; l++) {
            if (PQgetisnull(r, i, JOB_COL_BYTES + l))
                continue;
            const char *labels[] = { "job_id", PQgetvalue(r, i, 0), "link", links[l], NULL };
            if (prom_sample(out, "shoal_job_step_sent_bytes", labels,
                            strtod(PQgetvalue(r, i, JOB_COL_BYTES + l), NULL)) != 0)
                return METRICS_FULL;
        }
    }
    return 0;
}

/* Writes shoal_job_checkpoint_failures_total from column 14 above.
 * Returns 0 or METRICS_FULL. */
static int h_metrics_job_checkpoints(PGresult *r, struct buf *out)
{
    if (prom_family(out, "shoal_job_checkpoint_failures_total", "counter",
                    "Checkpoint uploads of the job that the server's checkpoint store failed (disk full, "
                    "read-only, I/O error); the job detail's checkpoint_error says the latest.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *labels[] = { "job_id", PQgetvalue(r, i, 0), NULL };
        if (prom_sample(out, "shoal_job_checkpoint_failures_total", labels,
                        strtod(PQgetvalue(r, i, JOB_COL_CKPT_FAILURES), NULL)) != 0)
            return METRICS_FULL;
    }
    return 0;
}

/* The per-job families.  Returns 0, METRICS_DB_FAILED or METRICS_FULL. */
static int h_metrics_jobs(PGconn *c, struct buf *out)
{
    struct shoal_err e;
    PGresult *r = db_exec(c, JOB_GAUGES_SQL, 0, NULL, &e);
    if (!r)
        return METRICS_DB_FAILED;
    int rc = h_metrics_job_gauges(r, out);
    if (rc == 0)
        rc = h_metrics_job_parts(r, out);
    if (rc == 0)
        rc = h_metrics_job_bytes(r, out);
    if (rc == 0)
        rc = h_metrics_job_checkpoints(r, out);
    PQclear(r);
    return rc;
}

/* Per tasklet of a live job that reported in its current plan epoch: job,
 * stage, replica, node, slowdown (NULL until measured), straggler (t/f);
 * ordered by job.  The rule and its inputs: job_tasklets_measured
 * (sql/017_read_models.sql). */
/* Its straggler factor, for the help text. */
#define STRAGGLER_FACTOR_TEXT "2.0"
#define TASKLET_GAUGES_SQL \
    "SELECT j.id, w.stage, w.replica, w.node_id, w.slowdown, w.straggler" \
    " FROM jobs j CROSS JOIN LATERAL job_tasklets_measured(j.id) w" \
    " WHERE j.state IN ('running', 'recovering') ORDER BY j.id, w.stage, w.replica"

/* Writes shoal_job_stragglers (per job with rows above, how many are
 * flagged; 0 before any slowdown is measured) and
 * shoal_tasklet_slowdown_ratio (per row with a slowdown).  Returns 0 or
 * METRICS_FULL. */
static int h_metrics_tasklet_rows(PGresult *r, struct buf *out)
{
    int n = PQntuples(r);
    if (prom_family(out, "shoal_job_stragglers", "gauge",
                    "Tasklets whose compute slowdown over the plan's prediction exceeds " STRAGGLER_FACTOR_TEXT
                    " times their job's median slowdown (docs/recovery.md).") != 0)
        return METRICS_FULL;
    int flagged = 0;
    for (int i = 0; i < n; i++) {
        flagged += strcmp(PQgetvalue(r, i, 5), "t") == 0;
        if (i + 1 < n && strcmp(PQgetvalue(r, i + 1, 0), PQgetvalue(r, i, 0)) == 0)
            continue;   /* the job has more rows */
        const char *labels[] = { "job_id", PQgetvalue(r, i, 0), NULL };
        if (prom_sample(out, "shoal_job_stragglers", labels, flagged) != 0)
            return METRICS_FULL;
        flagged = 0;
    }
    if (prom_family(out, "shoal_tasklet_slowdown_ratio", "gauge",
                    "A tasklet's median measured compute time over the plan's prediction for its node "
                    "and layers.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < n; i++) {
        if (PQgetisnull(r, i, 4))
            continue;
        const char *labels[] = { "job_id", PQgetvalue(r, i, 0), "stage", PQgetvalue(r, i, 1),
                                 "replica", PQgetvalue(r, i, 2), "node", PQgetvalue(r, i, 3), NULL };
        if (prom_sample(out, "shoal_tasklet_slowdown_ratio", labels, strtod(PQgetvalue(r, i, 4), NULL)) != 0)
            return METRICS_FULL;
    }
    return 0;
}

/* The per-tasklet families.  Returns 0, METRICS_DB_FAILED or METRICS_FULL. */
static int h_metrics_tasklets(PGconn *c, struct buf *out)
{
    struct shoal_err e;
    PGresult *r = db_exec(c, TASKLET_GAUGES_SQL, 0, NULL, &e);
    if (!r)
        return METRICS_DB_FAILED;
    int rc = h_metrics_tasklet_rows(r, out);
    PQclear(r);
    return rc;
}

/* $1 horizon (s).  The latest sample of every measured link between two
 * nodes heard from within the horizon: from, to, bandwidth (Gbit/s),
 * latency (ms).  The same sample links_latest picks, found through the
 * link_samples_pair index per pair, so a scrape costs N^2 index probes
 * however long the sample history grows. */
#define LINK_GAUGES_SQL \
    "WITH n AS (SELECT id FROM nodes WHERE removed_at IS NULL" \
    "   AND last_heartbeat_at > now() - make_interval(secs => $1::float8))" \
    " SELECT a.id, b.id, l.bandwidth_gbps, l.latency_ms FROM n a JOIN n b ON a.id <> b.id" \
    " CROSS JOIN LATERAL (SELECT s.bandwidth_gbps, s.latency_ms FROM link_samples s" \
    "   WHERE s.from_node = a.id AND s.to_node = b.id" \
    "   ORDER BY s.measured_at DESC, s.id DESC LIMIT 1) l" \
    " ORDER BY a.id, b.id"

/* Runs LINK_GAUGES_SQL.  Returns the result (caller PQclear's it), or NULL
 * if the database failed. */
static PGresult *h_metrics_links_query(PGconn *c)
{
    char p_horizon[32];
    struct shoal_err e;
    const char *params[] = { db_param_f64(p_horizon, METRICS_NODE_HORIZON_S) };
    return db_exec(c, LINK_GAUGES_SQL, 1, params, &e);
}

/* Writes shoal_link_bandwidth_bytes_per_second and shoal_link_latency_seconds
 * from the rows of LINK_GAUGES_SQL, converted to Prometheus's base units
 * (bytes, seconds; promtool warns on bits).  Directional: from -> to need
 * not equal to -> from.  Returns 0 or METRICS_FULL. */
static int h_metrics_links(PGresult *r, struct buf *out)
{
    if (prom_family(out, "shoal_link_bandwidth_bytes_per_second", "gauge",
                    "Latest measured bandwidth from one node to another, bytes per second.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *labels[] = { "from", PQgetvalue(r, i, 0), "to", PQgetvalue(r, i, 1), NULL };
        double gbps = strtod(PQgetvalue(r, i, 2), NULL);   /* Gbit/s */
        if (prom_sample(out, "shoal_link_bandwidth_bytes_per_second", labels, gbps * BYTES_PER_GBIT) != 0)
            return METRICS_FULL;
    }
    if (prom_family(out, "shoal_link_latency_seconds", "gauge",
                    "Latest measured latency from one node to another, seconds.") != 0)
        return METRICS_FULL;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *labels[] = { "from", PQgetvalue(r, i, 0), "to", PQgetvalue(r, i, 1), NULL };
        double ms = strtod(PQgetvalue(r, i, 3), NULL);      /* ms */
        if (prom_sample(out, "shoal_link_latency_seconds", labels, ms / MS_PER_SECOND) != 0)
            return METRICS_FULL;
    }
    return 0;
}

/* Writes the link families last; if they do not fit under the body cap,
 * cuts the output back to where they began and leaves them out. */
static void h_metrics_links_or_none(PGresult *r, struct buf *out)
{
    size_t mark = out->len;
    if (h_metrics_links(r, out) == 0)
        return;
    out->len = mark;
    if (out->data)
        out->data[mark] = '\0';
    log_warn("metrics: %d link series do not fit under the %zu-byte body cap; left out of /metrics",
             2 * PQntuples(r), out->limit);
}

/* The server's relay (--relay; none: nothing written): shoal_relay_up,
 * whether it answered this server's last look (relay_check.h; left out
 * before the first), and shoal_relay_unreachable_nodes, the nodes whose
 * agents' latest probe of it failed (relay_reach, 020_plan_visible.sql).
 * Returns 0, METRICS_DB_FAILED or METRICS_FULL. */
static int h_metrics_relay(PGconn *c, struct buf *out, struct relay_check *rc)
{
    struct shoal_err e;
    const char *relay = relay_check_address(rc);
    if (!relay)
        return 0;
    const char *labels[] = { "relay", relay, NULL }, *params[] = { relay };
    int up = relay_check_state(rc, NULL, 0);
    if (up >= 0 && (prom_family(out, "shoal_relay_up", "gauge", "1 if the relay (--relay) answered this server's "
                                "last check of its GET /healthz, 0 if not.") != 0 ||
                    prom_sample(out, "shoal_relay_up", labels, up) != 0))
        return METRICS_FULL;
    PGresult *r = db_exec(c, "SELECT count(*) FROM relay_reach r JOIN nodes n ON n.id = r.node_id"
                             " WHERE r.relay = $1 AND NOT r.reachable AND n.removed_at IS NULL", 1, params, &e);
    if (!r)
        return METRICS_DB_FAILED;
    double n = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    if (prom_family(out, "shoal_relay_unreachable_nodes", "gauge", "Nodes whose agent's latest probe of the "
                    "relay (--relay) failed: none of their links is planned through it.") != 0 ||
        prom_sample(out, "shoal_relay_unreachable_nodes", labels, n) != 0)
        return METRICS_FULL;
    return 0;
}

/* The families read from the database, and the links' rows for later.
 * Returns 0, METRICS_DB_FAILED or METRICS_FULL; *links is set only on 0. */
static int h_metrics_database(PGconn *c, struct buf *out, long heartbeat_timeout, struct relay_check *relay,
                              PGresult **links)
{
    int rc = h_metrics_by_state(c, out, "shoal_nodes", "state", "Registered nodes by state.",
                 "SELECT s, count(n.id) FROM unnest(ARRAY['idle','busy','draining','lost']) s"
                 " LEFT JOIN nodes n ON n.state = s AND n.removed_at IS NULL GROUP BY s ORDER BY s");
    if (rc == 0)
        rc = h_metrics_by_state(c, out, "shoal_jobs", "state", "Jobs by state.",
                 "SELECT s, count(j.id) FROM unnest(ARRAY['pending','scheduled','running',"
                 "'recovering','succeeded','failed','cancelled']) s"
                 " LEFT JOIN jobs j ON j.state = s GROUP BY s ORDER BY s");
    if (rc == 0)
        rc = h_metrics_nodes(c, out, heartbeat_timeout);
    if (rc == 0)
        rc = h_metrics_jobs(c, out);
    if (rc == 0)
        rc = h_metrics_tasklets(c, out);
    if (rc == 0)
        rc = h_metrics_relay(c, out, relay);
    if (rc == 0 && !(*links = h_metrics_links_query(c)))
        rc = METRICS_DB_FAILED;
    return rc;
}

/* The route lanes' workers (router.h, http.h): requests waiting for one,
 * requests running, and requests answered late (503 after waiting their
 * lane's limit) or refused (the queue full) since the start.  Returns 0 or
 * METRICS_FULL. */
static int h_metrics_lanes(struct server *srv, struct buf *out)
{
    static const struct { const char *name, *type, *help; } f[] = {
        { "shoal_http_lane_waiting", "gauge", "Requests waiting for a worker of their route lane." },
        { "shoal_http_lane_running", "gauge", "Requests a worker of their route lane is running." },
        { "shoal_http_lane_late_total", "counter", "Requests that waited their lane's limit for a worker." },
        { "shoal_http_lane_refused_total", "counter", "Requests refused because their lane's queue was full." },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (prom_family(out, f[i].name, f[i].type, f[i].help) != 0)
            return METRICS_FULL;
        for (int l = 0; l < ROUTE_LANES; l++) {
            struct workq_counts n;
            if (!srv->lanes[l])
                continue;
            workq_counts(srv->lanes[l], &n);
            double v[] = { n.waiting, n.running, (double)n.late, (double)n.refused };
            const char *labels[] = { "lane", route_lane_names[l], NULL };
            if (prom_sample(out, f[i].name, labels, v[i]) != 0)
                return METRICS_FULL;
        }
    }
    return 0;
}

/* The gauges this server keeps about itself.  Returns 0 or METRICS_FULL. */
static int h_metrics_process(struct server *srv, struct buf *out, int db_up, int pool_in_use)
{
    const struct { const char *name, *help; double value; } g[] = {
        { "shoal_database_up", "1 if the last query from /metrics reached the database.", db_up },
        { "shoal_db_pool_connections_in_use", "Database connections taken from this server's pool.", pool_in_use },
        { "shoal_db_pool_connections", "Size of this server's database pool.", db_pool_size(srv->db) },
        { "shoal_assignment_long_polls", "Assignment long-polls this server holds now.",
          (double)longpoll_waiting(srv->longpoll) },
        { "shoal_assignment_listener_up", "1 if this server's LISTEN connection for assignment changes is up.",
          longpoll_listening(srv->longpoll) },
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        if (prom_family(out, g[i].name, "gauge", g[i].help) != 0 ||
            prom_sample(out, g[i].name, NULL, g[i].value) != 0)
            return METRICS_FULL;
    }
    unsigned held;
    unsigned long refused;
    http_conns_counts(&held, &refused);
    if (prom_family(out, "shoal_http_connections", "gauge", "HTTP connections this server holds now.") != 0 ||
        prom_sample(out, "shoal_http_connections", NULL, held) != 0 ||
        prom_family(out, "shoal_http_connections_refused_total", "counter",
                    "Connections closed at accept: their address or the server at its connection limit.") != 0 ||
        prom_sample(out, "shoal_http_connections_refused_total", NULL, (double)refused) != 0)
        return METRICS_FULL;
    return h_metrics_lanes(srv, out);
}

void h_metrics(struct request *rq, struct response *rs)
{
    struct server *srv = rq->srv;
    struct shoal_err e;
    PGresult *links = NULL;
    int rc = METRICS_DB_FAILED;
    int full = metrics_render(srv->metrics, routes, &rs->text) != 0;
    PGconn *c = full ? NULL : db_acquire(srv->db, &e);
    if (c)
        rc = h_metrics_database(c, &rs->text, srv->cfg.heartbeat_timeout, srv->relay, &links);
    /* Read before releasing so the scrape's own connection counts as in use. */
    int in_use = db_pool_in_use(srv->db);
    db_release(srv->db, c);
    full = full || rc == METRICS_FULL || h_metrics_process(srv, &rs->text, rc == 0, in_use) != 0;
    if (full) {
        /* A body cut mid-line would be misread; say why instead. */
        size_t limit = rs->text.limit;
        buf_free(&rs->text);
        buf_init(&rs->text, limit);
        reply_fail(rs, 500, "internal", NULL, "the metrics do not fit under the %zu-byte body cap", limit);
        goto out;
    }
    if (links)
        h_metrics_links_or_none(links, &rs->text);
    rs->status = 200;
    rs->content_type = "text/plain; version=0.0.4; charset=utf-8";
out:
    PQclear(links);
}
