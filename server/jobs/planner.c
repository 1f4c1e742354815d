/* planner.c - a job's next plan epoch (planner.h). */
#include "planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/buf.h"
#include "../../common/log.h"
#include "../store/checkpoints.h"
#include "../store/db.h"
#include "jobspec.h"
#include "../store/queries.h"
#include "../sched/input.h"
#include "relay_check.h"
#include "plan_nodes.h"
#include "../base/server.h"

#define PLANNER_RANDOM_PLANS 1000   /* baseline: best of this many random plans */
/* A link that failed this job is priced like this (the API's slowest). */
#define PLANNER_AVOIDED_LATENCY_MS 600000.0
#define PLANNER_AVOIDED_BANDWIDTH_GBPS 1e-9

struct plan_work {
    struct plan_request req;
    int64_t job_id;
    int64_t resume_step;      /* the job's checkpoint to start from; -1: the spec's start */
    int64_t latest_step;      /* the highest step its tasklets reported; -1: none */
    int available;            /* live nodes offered to the scheduler */
    int64_t total_steps;
    struct plan_repair *repair;   /* a live resume on offer, or NULL */
    json_t *live;             /* {step, roots} when the stored plan is a live resume */
    int moved;                /* the recovery is a move off a drained node: nothing failed */
    struct scenario net;      /* those nodes and their links */
    struct sched_problem problem;
    const char *relay;        /* --relay when it answers the server (relay_check.h), else NULL */
    char relay_why[RELAY_CHECK_WHY_MAX];      /* --relay given and silent: why; else "" */
    /* The problem a repair is weighed in: the links as the search sees
     * them, but those blamed that have come back since (measured again, or
     * their relay answering again) priced as measured, not unusable
     * (planner_repair_problem).  Its matrices are the search's when no
     * blamed link came back, else their own (repair_latency_ms ...). */
    struct sched_problem repair_problem;
    double *repair_latency_ms, *repair_bandwidth_gbps;
    int links_back;           /* blamed links that came back */
    char relay_down[RELAY_CHECK_WHY_MAX + 300];   /* the failure went through the relay, which does not
                                                     answer: "relay HOST:PORT to answer again (why)"; "": no */
};

/* $1 job: the epoch its current plan has (0 before any). */
#define CURRENT_EPOCH "(SELECT plan_epoch FROM jobs WHERE id = $1)"

/* Live nodes: registered, heartbeat within the timeout, idle or busy in
 * this job (or in a job that has finished, whose agents have not said so
 * yet), and not in the current plan of another live job: {nodes, excluded,
 * unreadable}, the second those left out of this job after failures
 * (fault_judge.h), fewest failed epochs first, the third those whose
 * owners' data roots do not hold the job's data (policy_reads_job,
 * 019_site_policy.sql), which no plan of the job gets. */
#define LIVE_NODES_SQL \
    "SELECT json_build_object(" \
    " 'nodes', coalesce(json_agg(node_json(nodes) ORDER BY id) FILTER (WHERE x.node_id IS NULL AND r.reads), '[]')," \
    " 'excluded', coalesce(json_agg(node_json(nodes) ORDER BY x.epochs, id)" \
    "   FILTER (WHERE x.node_id IS NOT NULL AND r.reads), '[]')," \
    " 'unreadable', coalesce(json_agg(json_build_object('id', id, 'name', name, 'data_roots', policy -> 'data_roots')" \
    "   ORDER BY id) FILTER (WHERE NOT r.reads), '[]'))" \
    " FROM nodes LEFT JOIN job_excluded_nodes($1, " CURRENT_EPOCH ") x ON x.node_id = nodes.id," \
    "   LATERAL (SELECT coalesce(policy_reads_job(nodes.policy, $1), true) AS reads) r" \
    " WHERE state IN ('idle', 'busy')" \
    "   AND last_heartbeat_at > now() - make_interval(secs => $2::float8)" \
    "   AND (current_job_id IS NULL OR current_job_id = $1 OR NOT EXISTS (SELECT 1 FROM jobs cj" \
    "     WHERE cj.id = current_job_id AND cj.state IN ('scheduled', 'running', 'recovering')))" \
    "   AND NOT EXISTS (SELECT 1 FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "     JOIN jobs j ON j.id = p.job_id AND p.epoch = j.plan_epoch" \
    "     WHERE a.node_id = nodes.id AND j.id <> $1" \
    "       AND j.state IN ('scheduled', 'running', 'recovering'))"

/* $1 job, $2 the relay when it answers or NULL, $3 --relay or NULL: the
 * links it avoids, [{a, b, blamed, remeasured, relayed, once}] (a < b):
 * blamed after failures, or blocked both ways (link_blocked,
 * 016_reachability.sql) with no relay that both ends reach (relay_usable,
 * 020_plan_visible.sql; a link blocked one way only is dialled the other
 * way, and with a relay one blocked both ways goes through it,
 * 018_link_ways.sql).  For a blamed one: whether it was measured (either
 * way) since its latest blame, whether it goes through --relay (blocked
 * both ways), and whether it was blamed in one epoch only (the one being
 * recovered from: job_avoided_links). */
#define AVOIDED_LINKS_SQL \
    "WITH bl AS (SELECT least(f.reporter_node, f.suspect_node) AS a, greatest(f.reporter_node, f.suspect_node) AS b," \
    "   max(f.reported_at) AS at, count(DISTINCT f.epoch) AS epochs FROM job_faults f" \
    "   WHERE f.job_id = $1 AND f.verdict = 'link' AND f.reporter_node IS NOT NULL AND f.suspect_node IS NOT NULL" \
    "   GROUP BY 1, 2)" \
    " SELECT coalesce(json_agg(json_build_object('a', l.a, 'b', l.b, 'blamed', l.blamed," \
    "   'remeasured', l.blamed AND EXISTS (SELECT 1 FROM link_samples s WHERE s.measured_at > bl.at" \
    "     AND ((s.from_node = l.a AND s.to_node = l.b) OR (s.from_node = l.b AND s.to_node = l.a)))," \
    "   'relayed', $3::text IS NOT NULL AND link_blocked(l.a, l.b) AND link_blocked(l.b, l.a)," \
    "   'once', coalesce(bl.epochs = 1, false)) ORDER BY l.a, l.b), '[]')" \
    " FROM (SELECT a, b, bool_or(blamed) AS blamed FROM (SELECT a, b, true AS blamed" \
    "     FROM job_avoided_links($1, " CURRENT_EPOCH ")" \
    "   UNION ALL SELECT least(r.from_node, r.to_node), greatest(r.from_node, r.to_node), false FROM link_reach r" \
    "     WHERE NOT r.reachable AND link_blocked(r.to_node, r.from_node)" \
    "       AND NOT (relay_usable(r.from_node, $2::text) AND relay_usable(r.to_node, $2::text))) u" \
    "   GROUP BY a, b) l LEFT JOIN bl ON bl.a = l.a AND bl.b = l.b"

void planner_free(struct plan_work *w)
{
    if (!w)
        return;
    planner_offer_repair(w, NULL);
    json_decref(w->live);
    scenario_free(&w->net);
    free(w->repair_latency_ms);
    free(w->repair_bandwidth_gbps);
    free(w);
}

const struct sched_problem *planner_problem(const struct plan_work *w)
{
    return &w->problem;
}

const struct sched_problem *planner_repair_problem(const struct plan_work *w)
{
    return &w->repair_problem;
}

const char *planner_relay_down(const struct plan_work *w)
{
    return w->relay_down[0] ? w->relay_down : NULL;
}

int64_t planner_resume_step(const struct plan_work *w)
{
    return w->resume_step;
}

int64_t planner_total_steps(const struct plan_work *w)
{
    return w->total_steps;
}

int planner_resume_live(const struct plan_work *w)
{
    return w->live != NULL;
}

void planner_offer_repair(struct plan_work *w, struct plan_repair *r)
{
    if (w->repair) {
        sched_plan_free(&w->repair->plan);
        free(w->repair->roots);
        free(w->repair);
    }
    w->repair = r;
}

/* Between the search's plan and the repair on offer: returns the one to
 * store, and in *choice why ({step, repair_s, searched_s, steps_saved,
 * chosen, drain, links_back}); the repair chosen sets the resume step and
 * w->live.  The repair is priced in the repair problem (blamed links that
 * came back at their measured values).  A move off a drained node takes
 * the repair whenever it fits in memory: nothing failed, the survivors
 * hold the step in flight and the plan they trained at keeps its layers,
 * while the two predictions differ only by the nodes' registered speeds,
 * each timed once at the agent's start-up (a busy machine times its own
 * load), which a re-split of the layers would chase at the price of steps
 * trained again (docs/recovery.md). */
static const struct sched_plan *choose_repair(struct plan_work *w, const struct sched_plan *searched,
                                              json_t **choice, struct shoal_err *e)
{
    struct plan_repair *r = w->repair;
    *choice = NULL;
    if (!r)
        return searched;
    if (sched_predict(&w->repair_problem, &r->plan, e) != 0)
        return NULL;
    double left = (double)(w->total_steps - r->step);
    int64_t saved = r->step - (w->resume_step > 0 ? w->resume_step : 0);
    int take = r->plan.cost.feasible &&
               (w->moved || r->plan.cost.total_s * left <= searched->cost.total_s * (left + (double)saved));
    *choice = json_pack("{s:I, s:f, s:f, s:I, s:s, s:b, s:i}", "step", (json_int_t)r->step,
                        "repair_s", r->plan.cost.total_s, "searched_s", searched->cost.total_s,
                        "steps_saved", (json_int_t)saved, "chosen", take ? "survivors" : "checkpoint",
                        "drain", w->moved, "links_back", w->links_back);
    if (!take)
        return searched;
    json_t *roots = json_array();
    for (int s = 0; s < r->plan.stages; s++)
        json_array_append_new(roots, r->roots[s] >= 0 ? json_integer(r->roots[s]) : json_null());
    w->live = json_pack("{s:I, s:o}", "step", (json_int_t)r->step, "roots", roots);
    w->resume_step = r->step;
    return &r->plan;
}

enum sched_cost planner_cost(const struct plan_work *w)
{
    return w->problem.cost;
}

/* Steps a new epoch trains again: from where it resumes to the latest step
 * reported. */
static int64_t planner_retrained(const struct plan_work *w)
{
    int64_t from = w->resume_step > 0 ? w->resume_step : 0, n = w->latest_step + 1 - from;
    return n > 0 ? n : 0;
}

/* Checks the job's state; sets w->resume_step: a job that has run goes on
 * from its newest whole checkpoint; one that has none (or never ran)
 * starts from its initial weights where it has them (step 0; some but
 * not all of them: 409), else from the spec's start (-1). */
static int planner_job(struct server *srv, struct plan_work *w, json_t *job, struct shoal_err *e)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    int ok = w->req.only_if_recovering
                 ? strcmp(state, "recovering") == 0
                 : strcmp(state, "pending") == 0 || strcmp(state, "scheduled") == 0 ||
                       strcmp(state, "running") == 0 || strcmp(state, "recovering") == 0;
    if (!ok)
        return err_set(e, 409, "conflict", "state", "job %lld is %s; only pending, scheduled, running or recovering "
                       "jobs are scheduled", (long long)w->job_id, state);
    w->resume_step = -1;
    w->total_steps = json_integer_value(json_object_get(job, "total_steps"));
    json_t *latest = json_object_get(job, "latest_step");
    w->latest_step = json_is_integer(latest) ? json_integer_value(latest) : -1;
    w->moved = strcmp(state, "recovering") == 0 && json_is_true(json_object_get(job, "moved"));
    if (json_is_true(json_object_get(job, "started")) &&
        checkpoints_latest_valid(srv, w->job_id, w->total_steps, &w->resume_step, e) != 0)
        return -1;
    if (w->resume_step < 0 && checkpoints_initial(srv, w->job_id, &w->resume_step, e) != 0)
        return -1;
    /* A running job is re-planned only when the operator says so: it
     * trains again what it trained since the checkpoint it resumes from. */
    if (strcmp(state, "running") == 0 && !w->req.replan && !w->req.dry_run && !w->req.only_if_recovering)
        return err_set(e, 409, "replan_required", "replan", "job %lld is running (its tasklets reported step "
                       "%lld); a new plan restarts it from step %lld and trains %lld steps again; send "
                       "\"replan\": true to do that", (long long)w->job_id, (long long)w->latest_step,
                       (long long)(w->resume_step > 0 ? w->resume_step : 0), (long long)planner_retrained(w));
    return 0;
}

/* The replicas a job of `spec` can train with on `available` nodes: its
 * own, or when they are too many the most that divide its global batch
 * (replicas x micro-batches, so each replica trains a whole number of
 * micro-batches and every step reads the same sequences, data.h) and fit;
 * 1, the fewest, when not even one fits. */
static int64_t fewer_replicas(const struct job_spec *spec, int available)
{
    int64_t global = spec->replicas * spec->micro_batches;
    for (int64_t d = spec->replicas; d > 1; d--)
        if (global % d == 0 && spec->stages * d <= available)
            return d;
    return 1;
}

/* Prices each link of `pairs` (AVOIDED_LINKS_SQL's) as unusable both ways
 * in the n x n matrices lat and bw over net's nodes, so that the search
 * routes around it where it can; with `skip_back`, not those marked
 * "back" (came back since their blame: repair_links). */
static void avoid_links(const struct scenario *net, double *lat, double *bw, const json_t *pairs, int skip_back)
{
    size_t k;
    json_t *pair;
    json_array_foreach(pairs, k, pair) {
        if (skip_back && json_is_true(json_object_get(pair, "back")))
            continue;
        int64_t a = json_integer_value(json_object_get(pair, "a")), b = json_integer_value(json_object_get(pair, "b"));
        int i = -1, j = -1;
        for (int x = 0; x < net->n; x++) {
            i = net->nodes[x].id == a ? x : i;
            j = net->nodes[x].id == b ? x : j;
        }
        if (i < 0 || j < 0)
            continue;
        int n = net->n;
        lat[i * n + j] = lat[j * n + i] = PLANNER_AVOIDED_LATENCY_MS;
        bw[i * n + j] = bw[j * n + i] = PLANNER_AVOIDED_BANDWIDTH_GBPS;
    }
}

/* Marks "back" the blamed links of `pairs` that have come back, for the
 * repair's pricing: measured again since their blame, or (blamed in the
 * epoch being recovered from only) when that epoch's failure went through
 * the relay (one of its blamed links is relayed) and the relay answers the
 * recovery thread now.  A relay's failure breaks every relayed link at
 * once and, in cascade, the links of the tasklets that stop with them
 * (their neighbours report them): once it answers again, that epoch's
 * blames say nothing more about the links.  Sets w->links_back, and
 * w->relay_down when the failure went through the relay and it does not
 * answer. */
static void repair_links(struct server *srv, struct plan_work *w, json_t *pairs)
{
    size_t k;
    json_t *pair;
    int through_relay = 0, relay_ok = 0;
    json_array_foreach(pairs, k, pair)
        through_relay |= json_is_true(json_object_get(pair, "blamed")) &&
                         json_is_true(json_object_get(pair, "once")) && json_is_true(json_object_get(pair, "relayed"));
    if (through_relay && w->req.only_if_recovering && srv->relay) {
        relay_ok = w->relay != NULL;   /* planner_prepare asked it just now */
        if (!relay_ok)
            snprintf(w->relay_down, sizeof w->relay_down, "relay %s to answer again (%s)", srv->cfg.relay,
                     w->relay_why);
    }
    json_array_foreach(pairs, k, pair) {
        int back = json_is_true(json_object_get(pair, "blamed")) &&
                   (json_is_true(json_object_get(pair, "remeasured")) ||
                    (relay_ok && json_is_true(json_object_get(pair, "once"))));
        json_object_set_new(pair, "back", json_boolean(back));
        w->links_back += back;
    }
}

int planner_prepare(struct server *srv, int64_t job_id, const struct plan_request *req, struct plan_work **out,
                    struct shoal_err *e)
{
    char p_id[24], p_timeout[32], what[40];
    struct job_spec spec;
    json_t *job = NULL, *live = NULL, *links = NULL, *doc = NULL, *avoided = NULL;
    struct plan_work *w = calloc(1, sizeof *w);
    int rc = -1;
    *out = NULL;
    if (!w)
        return err_set(e, 500, "internal", NULL, "out of memory");
    w->req = *req;
    w->job_id = job_id;
    db_param_i64(p_id, job_id);
    snprintf(what, sizeof what, "job %s", p_id);
    db_param_f64(p_timeout, (double)srv->cfg.heartbeat_timeout);
    const char *params[] = { p_id, p_timeout };
    job = db_query_json(srv->db, "SELECT json_build_object('state', state, 'spec', spec, 'total_steps', total_steps,"
                        " 'started', started_at IS NOT NULL, 'moved', recovery_moved, 'latest_step',"
                        " (SELECT max(step) FROM job_steps WHERE job_id = jobs.id)) FROM jobs WHERE id = $1",
                        1, params, what, e);
    if (!job || planner_job(srv, w, job, e) != 0 || jobspec_parse(json_object_get(job, "spec"), &spec, e) != 0)
        goto out;
    live = db_query_json(srv->db, LIVE_NODES_SQL, 2, params, "nodes", e);
    if (!live)
        goto out;
    /* the relay as it is now: one that does not answer joins nothing, and
     * the plan that would need it is refused, naming it (check_reachable) */
    if (srv->relay && relay_check_now(srv->relay) == 0)
        relay_check_state(srv->relay, w->relay_why, sizeof w->relay_why);
    else
        w->relay = srv->relay ? relay_check_address(srv->relay) : NULL;
    if (w->relay && relay_check_forget_failures(srv->relay, srv->db, e) != 0)
        goto out;
    char p_avoid_lat[32], p_avoid_bw[32];
    const char *links_params[] = { w->relay,
                                   db_param_f64(p_avoid_lat, PLANNER_AVOIDED_LATENCY_MS),
                                   db_param_f64(p_avoid_bw, PLANNER_AVOIDED_BANDWIDTH_GBPS) };
    links = db_query_json(srv->db, "SELECT planning_links_json($1::text, $2::float8, $3::float8)", 3,
                          links_params, "links", e);
    if (!links)
        goto out;
    const char *avoid_params[] = { p_id, w->relay, srv->cfg.relay[0] ? srv->cfg.relay : NULL };
    avoided = db_query_json(srv->db, AVOIDED_LINKS_SQL, 3, avoid_params, what, e);
    if (!avoided)
        goto out;
    json_t *nodes = json_object_get(live, "nodes");
    char left_out[200], unreadable[300];
    readmit_excluded(nodes, json_object_get(live, "excluded"), spec.stages * spec.replicas, left_out,
                     sizeof left_out);
    name_unreadable(json_object_get(live, "unreadable"), unreadable, sizeof unreadable);
    doc = json_pack("{s:O}", "nodes", nodes);
    w->available = (int)json_array_size(nodes);
    int64_t replicas = w->req.fewer_replicas && strcmp(spec.sync, "every_step") == 0
                           ? fewer_replicas(&spec, w->available) : spec.replicas;
    if (spec.stages * replicas > w->available) {
        err_set(e, 409, "not_enough_nodes", "parallelism",
                "job %s needs %lld nodes (%lld stages x %lld replicas%s) and %d are available "
                "(idle or in this job, heartbeat within %ld s, not draining, not planned for another job%s%s)",
                p_id, (long long)(spec.stages * replicas), (long long)spec.stages, (long long)replicas,
                replicas < spec.replicas ? ", the fewest that keep its global batch" : "", w->available,
                srv->cfg.heartbeat_timeout, left_out, unreadable);
        goto out;
    }
    if (input_network(doc, links, w->req.fill_latency_ms, w->req.fill_bandwidth_gbps, &w->net, e) != 0) {
        if (w->relay && strcmp(e->code, "missing_links") == 0) {
            char was[sizeof e->message];
            snprintf(was, sizeof was, "%s", e->message);
            err_set(e, e->status, e->code, e->field, "pairs that cannot connect either way go through the relay %s "
                    "(--relay), priced from their ends' links to it, and nodes that have measured none yet leave "
                    "it unpriced: wait for their agents' probes, or give fill values; %s", w->relay, was);
        }
        goto out;
    }
    repair_links(srv, w, avoided);
    size_t cells = (size_t)w->net.n * (size_t)w->net.n;
    if (w->links_back > 0) {
        w->repair_latency_ms = malloc(cells * sizeof *w->repair_latency_ms + 1);
        w->repair_bandwidth_gbps = malloc(cells * sizeof *w->repair_bandwidth_gbps + 1);
        if (!w->repair_latency_ms || !w->repair_bandwidth_gbps) {
            err_set(e, 500, "internal", NULL, "out of memory");
            goto out;
        }
        memcpy(w->repair_latency_ms, w->net.latency_ms, cells * sizeof *w->repair_latency_ms);
        memcpy(w->repair_bandwidth_gbps, w->net.bandwidth_gbps, cells * sizeof *w->repair_bandwidth_gbps);
        avoid_links(&w->net, w->repair_latency_ms, w->repair_bandwidth_gbps, avoided, 1);
    }
    avoid_links(&w->net, w->net.latency_ms, w->net.bandwidth_gbps, avoided, 0);
    struct sched_problem *pb = &w->problem;
    jobspec_sched_model(&spec, pb);
    pb->replicas = (int)replicas;
    pb->model.micro_batches = spec.replicas * spec.micro_batches / replicas;
    pb->n = w->net.n;
    pb->nodes = w->net.nodes;
    pb->latency_ms = w->net.latency_ms;
    pb->bandwidth_gbps = w->net.bandwidth_gbps;
    pb->cost = strcmp(w->req.cost_model, "dtfm") == 0 ? SCHED_COST_DTFM : SCHED_COST_SHOAL;
    rc = sched_problem_check(pb, e);
    w->repair_problem = *pb;
    if (w->links_back > 0) {
        w->repair_problem.latency_ms = w->repair_latency_ms;
        w->repair_problem.bandwidth_gbps = w->repair_bandwidth_gbps;
    }
out:
    json_decref(job);
    json_decref(live);
    json_decref(links);
    json_decref(doc);
    json_decref(avoided);
    if (rc == 0)
        *out = w;
    else
        planner_free(w);
    return rc;
}

/* The plan's stages as JSON: [{stage, layer_start, layer_end, nodes: [ids]}]. */
static json_t *plan_stages_json(const struct sched_problem *pb, const struct sched_plan *plan)
{
    json_t *stages = json_array();
    for (int s = 0; s < plan->stages; s++) {
        json_t *ids = json_array();
        for (int r = 0; r < plan->replicas; r++)
            json_array_append_new(ids, json_integer(pb->nodes[plan->node[s * plan->replicas + r]].id));
        json_array_append_new(stages, json_pack("{s:i, s:i, s:i, s:o}", "stage", s, "layer_start",
                                                plan->layer_start[s], "layer_end", plan->layer_end[s], "nodes", ids));
    }
    return stages;
}

/* $1 job, $2 cost model, $3 predicted s, $4 detail, $5-$9 the tasklets
 * (stage, replica, node, layer_start, layer_end arrays), $10 the states it
 * may be stored from, $11 the resume step or NULL, $12 the live resume
 * ({step, roots}) or NULL, $13 replicas, $14 micro-batches per replica and
 * step, $15 the relay (--relay) or NULL, $16 whether the head is tied
 * across stages (its two ends connect); each connection's way
 * (018_link_ways.sql) is decided here.  One statement: the new
 * epoch, the plan, its assignments, and the steps that will be trained
 * again dropped from job_steps (with the count of finished tasklets: all
 * of them for a live resume at the last step, which trains nothing and
 * only stores the final checkpoint, JOB_DONE_WHERE_SQL).  A
 * live resume at step s also records step s-1 for the failed epoch's
 * tasklets that died after its all-reduce, before their report (stand-ins:
 * the last stage's loss from the next replica's ring_prev_loss, no times;
 * live_resume.h), when the failed epoch trained it. */
#define PLAN_STORE_SQL \
    "WITH j AS (UPDATE jobs SET plan_epoch = plan_epoch + 1, state = 'scheduled'," \
    "   tasklets_finished = CASE WHEN $11::bigint >= total_steps THEN stages * $13::int ELSE 0 END," \
    "   recover_after = NULL, recovery_waiting = NULL, schedule_refused = NULL, updated_at = now()" \
    "   WHERE id = $1 AND state = ANY ($10::text[]) RETURNING id, plan_epoch)," \
    " p AS (INSERT INTO plans (job_id, epoch, cost_model, predicted_iteration_s, detail, resume_step, live," \
    "     replicas, micro_batches, relay)" \
    "   SELECT id, plan_epoch, $2, $3, $4::jsonb, $11::bigint, $12::jsonb, $13::int, $14::int, $15 FROM j" \
    "   RETURNING id, epoch)," \
    " t AS (SELECT * FROM unnest($5::int[], $6::int[], $7::bigint[], $8::int[], $9::int[]) AS t(s, r, n, ls, le))," \
    " a AS (INSERT INTO assignments (plan_id, stage, replica, node_id, layer_start, layer_end," \
    "     next_way, up_way, tie_way)" \
    "   SELECT p.id, t.s, t.r, t.n, t.ls, t.le, link_way(t.n, nx.n, $15::text IS NOT NULL)," \
    "     link_way(t.n, up.n, $15::text IS NOT NULL), link_way(t.n, tie.n, $15::text IS NOT NULL)" \
    "   FROM p, t LEFT JOIN t nx ON nx.s = t.s + 1 AND nx.r = t.r" \
    "   LEFT JOIN t up ON up.s = t.s AND up.r = (t.r + 1) % $13::int AND up.r <> t.r" \
    "   LEFT JOIN t tie ON $16::boolean AND tie.r = t.r AND tie.s <> t.s AND tie.s = CASE WHEN t.s = 0" \
    "     THEN (SELECT max(s) FROM t) WHEN t.s = (SELECT max(s) FROM t) THEN 0 END" \
    "   RETURNING 1)," \
    " d AS (DELETE FROM job_steps s USING j WHERE s.job_id = j.id AND s.step >= coalesce($11::bigint, 0)" \
    "   RETURNING 1)," \
    " si AS (INSERT INTO job_steps (job_id, step, stage, replica, epoch, node_id, loss, stand_in)" \
    "   SELECT j.id, $11::bigint - 1, a.stage, a.replica, fp.epoch, a.node_id," \
    "     CASE WHEN a.stage = jj.stages - 1" \
    "       THEN " PASSED_LOSS_SQL("j.id", "$11::bigint - 1", "a.stage", "a.replica", "fp.replicas", "fp.epoch") \
    "     END, true" \
    "   FROM j JOIN jobs jj ON jj.id = j.id JOIN plans fp ON fp.job_id = j.id AND fp.epoch = j.plan_epoch - 1" \
    "   JOIN assignments a ON a.plan_id = fp.id" \
    "   WHERE $12::jsonb IS NOT NULL AND $11::bigint - 1 >= coalesce(fp.resume_step, 0)" \
    "   ON CONFLICT (job_id, step, stage, replica) DO NOTHING RETURNING 1)" \
    " SELECT json_build_object('epoch', p.epoch, 'assignments', (SELECT count(*) FROM a)," \
    "   'steps_dropped', (SELECT count(*) FROM d), 'stand_ins', (SELECT count(*) FROM si)) FROM p"

/* $1-$3 the tasklets (stage, replica, node arrays), $4 replicas, $5 a tied
 * head, $6 the relay that answers or NULL: the pairs of nodes the plan
 * connects (pipeline neighbours, ring neighbours, a tied head's two ends)
 * whose agents tried to connect to each other both ways and could not
 * (link_reach; the server failing to reach both from outside says nothing
 * about whether they reach each other, on one LAN say) and that the relay
 * does not join (none, or an end's probe of it failed: relay_usable),
 * {pairs: "id (name) and id (name), ...", relay_silent: "node id (name):
 * why; ..." of those pairs' ends whose probe of the relay failed}; "" when
 * none. */
#define UNREACHABLE_PAIRS_SQL \
    "WITH t AS (SELECT * FROM unnest($1::int[], $2::int[], $3::bigint[]) AS t(s, r, n))" \
    " SELECT json_build_object('pairs'," \
    "   coalesce(string_agg(DISTINCT format('%s (%s) and %s (%s)', x.id, x.name, y.id, y.name), ', '), '')," \
    "   'relay_silent', (SELECT coalesce(string_agg(format('node %s (%s): %s', n.id, n.name," \
    "       coalesce(r.why, 'no reason given')), '; ' ORDER BY n.id), '') FROM relay_reach r JOIN nodes n ON n.id = r.node_id" \
    "     WHERE r.relay = $6::text AND NOT r.reachable AND r.node_id IN (SELECT unnest(array_agg(x.id) || array_agg(y.id)))))" \
    " FROM t a JOIN t b ON (b.r = a.r AND b.s = a.s + 1)" \
    "   OR (b.s = a.s AND b.r = (a.r + 1) % $4::int AND b.r <> a.r)" \
    "   OR ($5::boolean AND b.r = a.r AND a.s = 0 AND b.s > 0 AND b.s = (SELECT max(s) FROM t))" \
    " JOIN nodes x ON x.id = least(a.n, b.n) JOIN nodes y ON y.id = greatest(a.n, b.n)" \
    " WHERE EXISTS (SELECT 1 FROM link_reach r WHERE r.from_node = a.n AND r.to_node = b.n AND NOT r.reachable)" \
    "   AND EXISTS (SELECT 1 FROM link_reach r WHERE r.from_node = b.n AND r.to_node = a.n AND NOT r.reachable)" \
    "   AND NOT (relay_usable(a.n, $6::text) AND relay_usable(b.n, $6::text))"

/* A plan that connects two nodes that cannot connect to each other either
 * way, with no relay to join them (none given, one that does not answer
 * the server, or one an end's agent failed to reach), is refused (422
 * "unreachable", or "relay_unreachable" naming the relay and why it is no
 * help), naming them, rather than stored to fail at its first dial. */
static int check_reachable(struct server *srv, const struct plan_work *w, const struct sched_plan *plan,
                           struct buf a[3], struct shoal_err *e)
{
    char p_replicas[24];
    const char *params[] = { a[0].data, a[1].data, a[2].data, db_param_i64(p_replicas, plan->replicas),
                             w->problem.model.tied ? "true" : "false", w->relay };
    json_t *res = db_query_json(srv->db, "SELECT (" UNREACHABLE_PAIRS_SQL ")", 6, params, "plan", e);
    if (!res)
        return -1;
    int rc = 0;
    const char *pairs = json_string_value(json_object_get(res, "pairs"));
    const char *silent = json_string_value(json_object_get(res, "relay_silent"));
    if (!pairs || !pairs[0])
        rc = 0;
    else if (!srv->cfg.relay[0])
        rc = err_set(e, 422, "unreachable", "plan", "nodes %s cannot connect to each other either way (their agents "
                     "said so, or the server cannot reach their peer ports) and this server has no --relay: run "
                     "shoal-relay where both can reach it and pass --relay, or plan without one of them", pairs);
    else if (w->relay_why[0])
        rc = err_set(e, 422, "relay_unreachable", "relay", "the relay %s (--relay) does not answer: %s; nodes %s "
                     "cannot connect to each other either way and only the relay can join them: start shoal-relay "
                     "there (or give --relay the address where it runs), or plan without one of them",
                     srv->cfg.relay, w->relay_why, pairs);
    else
        rc = err_set(e, 422, "relay_unreachable", "relay", "the relay %s (--relay) does not answer the probes of "
                     "%s; nodes %s cannot connect to each other either way and only the relay can join them: let "
                     "those nodes reach it (a firewall? the relay's --secret-file against the server's?), or plan "
                     "without one of them", srv->cfg.relay, silent && silent[0] ? silent : "their agents", pairs);
    json_decref(res);
    return rc;
}

/* Stores the plan.  Returns the epoch, or -1 with `e` set (409 if the job
 * left a state it may be stored from meanwhile). */
static long planner_store(struct server *srv, const struct plan_work *w, const struct sched_plan *plan,
                          const json_t *detail, struct shoal_err *e)
{
    struct buf a[5];
    const char *sep;
    char p_id[24], p_cost[32], p_resume[24], p_replicas[24], p_micro[24];
    long epoch = -1;
    char *detail_text = json_dumps(detail, JSON_COMPACT | JSON_REAL_PRECISION(15));
    char *live_text = w->live ? json_dumps(w->live, JSON_COMPACT) : NULL;
    for (int k = 0; k < 5; k++)
        buf_init(&a[k], 16u << 20);
    for (int s = 0; s < plan->stages; s++) {
        for (int r = 0; r < plan->replicas; r++) {
            sep = s == 0 && r == 0 ? "{" : ",";
            buf_printf(&a[0], "%s%d", sep, s);
            buf_printf(&a[1], "%s%d", sep, r);
            buf_printf(&a[2], "%s%lld", sep, (long long)w->problem.nodes[plan->node[s * plan->replicas + r]].id);
            buf_printf(&a[3], "%s%d", sep, plan->layer_start[s]);
            buf_printf(&a[4], "%s%d", sep, plan->layer_end[s]);
        }
    }
    for (int k = 0; k < 5; k++)
        buf_append(&a[k], "}", 1);
    if (check_reachable(srv, w, plan, a, e) != 0)
        goto out;
    const char *params[] = { db_param_i64(p_id, w->job_id), w->req.cost_model,
                             db_param_f64(p_cost, plan->cost.total_s), detail_text,
                             a[0].data, a[1].data, a[2].data, a[3].data, a[4].data,
                             w->req.only_if_recovering ? "{recovering}" : "{pending,scheduled,running,recovering}",
                             w->resume_step >= 0 ? db_param_i64(p_resume, w->resume_step) : NULL, live_text,
                             db_param_i64(p_replicas, plan->replicas),
                             db_param_i64(p_micro, w->problem.model.micro_batches),
                             w->relay, w->problem.model.tied ? "true" : "false" };
    json_t *res = db_query_json(srv->db, PLAN_STORE_SQL, 16, params, "job", e);
    if (res) {
        epoch = (long)json_integer_value(json_object_get(res, "epoch"));
        log_info("plan stored job=%s epoch=%ld resume_step=%lld steps_dropped=%lld stand_ins=%lld", p_id, epoch,
                 (long long)w->resume_step, (long long)json_integer_value(json_object_get(res, "steps_dropped")),
                 (long long)json_integer_value(json_object_get(res, "stand_ins")));
    } else if (e->status == 404) {
        err_set(e, 409, "conflict", "state", "job %s changed state while it was being scheduled", p_id);
    }
    json_decref(res);
out:
    free(detail_text);
    free(live_text);
    for (int k = 0; k < 5; k++)
        buf_free(&a[k]);
    return epoch;
}

static json_t *breakdown_json(const struct sched_breakdown *b)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "total_s", b->total_s, "dp_s", b->dp_s,
                     "pipeline_s", b->pipeline_s, "compute_s", b->compute_s, "comm_s", b->comm_s,
                     "bubble_s", b->bubble_s, "optimizer_s", b->optimizer_s, "feasible", b->feasible);
}

/* The plan as it stands (nodes and layers) under each cost model:
 * {"shoal": breakdown, "dtfm": breakdown}, or NULL with e set. */
static json_t *plan_predictions(const struct plan_work *w, const struct sched_plan *plan, struct shoal_err *e)
{
    static const char *const names[] = { "dtfm", "shoal" };   /* by enum sched_cost */
    static const enum sched_cost models[] = { SCHED_COST_SHOAL, SCHED_COST_DTFM };
    struct sched_plan copy;
    json_t *out = json_object();
    if (!out || sched_plan_init(&copy, plan->stages, plan->replicas) != 0) {
        json_decref(out);
        err_set(e, 500, "internal", NULL, "out of memory");
        return NULL;
    }
    size_t cells = (size_t)plan->stages * (size_t)plan->replicas;
    memcpy(copy.node, plan->node, cells * sizeof *copy.node);
    memcpy(copy.layer_start, plan->layer_start, (size_t)plan->stages * sizeof *copy.layer_start);
    memcpy(copy.layer_end, plan->layer_end, (size_t)plan->stages * sizeof *copy.layer_end);
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        struct sched_problem pb = w->problem;
        pb.cost = models[k];
        if (sched_predict(&pb, &copy, e) != 0) {
            json_decref(out);
            out = NULL;
            break;
        }
        json_object_set_new(out, names[models[k]], breakdown_json(&copy.cost));
    }
    sched_plan_free(&copy);
    return out;
}

/* The answer's common part (breakdown, stages, predictions), then the plan
 * stored unless a dry run.  Takes `detail`; returns it completed, or NULL
 * with e set. */
static json_t *planner_finish(struct server *srv, struct plan_work *w, const struct sched_plan *plan,
                              json_t *detail, struct shoal_err *e)
{
    json_t *pred = detail ? plan_predictions(w, plan, e) : NULL;
    long epoch = 0;
    if (!detail) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto fail;
    }
    if (!pred)
        goto fail;
    json_object_set_new(detail, "breakdown", breakdown_json(&plan->cost));
    json_object_set_new(detail, "predictions", pred);
    pred = NULL;
    struct sched_bytes bytes;
    if (sched_bytes_per_step(&w->problem, plan, &bytes, e) != 0)
        goto fail;
    json_object_set_new(detail, "bytes_per_step", json_pack("{s:I, s:I, s:I}", "stage_links",
        (json_int_t)bytes.stage_links, "sync", (json_int_t)bytes.sync, "tied_head", (json_int_t)bytes.tied_head));
    json_object_set_new(detail, "stages", plan_stages_json(&w->problem, plan));
    json_object_set_new(detail, "nodes_available", json_integer(w->available));
    json_object_set_new(detail, "replicas", json_integer(plan->replicas));
    json_object_set_new(detail, "micro_batches", json_integer(w->problem.model.micro_batches));
    json_object_set_new(detail, "resume_step", w->resume_step >= 0 ? json_integer(w->resume_step) : json_null());
    json_object_set_new(detail, "steps_retrained", json_integer(planner_retrained(w)));
    if (!w->req.dry_run && (epoch = planner_store(srv, w, plan, detail, e)) < 0)
        goto fail;
    json_object_set_new(detail, "job_id", json_integer(w->job_id));
    json_object_set_new(detail, "dry_run", json_boolean(w->req.dry_run));
    json_object_set_new(detail, "epoch", w->req.dry_run ? json_null() : json_integer(epoch));
    json_object_set_new(detail, "cost_model", json_string(w->req.cost_model));
    json_object_set_new(detail, "predicted_iteration_s", json_real(plan->cost.total_s));
    return detail;
fail:
    json_decref(pred);
    json_decref(detail);
    return NULL;
}

json_t *planner_run(struct server *srv, struct plan_work *w, struct shoal_err *e)
{
    struct sched_plan plan;
    json_t *detail = NULL;
    memset(&plan, 0, sizeof plan);
    struct sched_options opt = { .seed = (uint64_t)w->req.seed, .budget_ms = (double)w->req.budget_ms,
                                 .candidates = w->req.candidates, .random_plans = PLANNER_RANDOM_PLANS };
    if (sched_plan_init(&plan, w->problem.stages, w->problem.replicas) != 0) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto out;
    }
    json_t *choice = NULL;
    const struct sched_plan *chosen;
    if (sched_search(&w->problem, &opt, &plan, e) != 0 ||
        !(chosen = choose_repair(w, &plan, &choice, e)))
        goto out;
    detail = planner_finish(srv, w, chosen, json_pack("{s:{s:f, s:f, s:I}, s:I, s:I, s:I, s:b, s:o*}",
        "baselines", "sequential_s", plan.baselines.sequential_s, "best_random_s", plan.baselines.best_random_s,
        "random_plans", (json_int_t)plan.baselines.random_plans,
        "seed", (json_int_t)w->req.seed, "budget_ms", (json_int_t)w->req.budget_ms,
        "candidates", (json_int_t)w->req.candidates, "forced", 0, "live_resume", choice), e);
out:
    sched_plan_free(&plan);
    return detail;
}

json_t *planner_force(struct server *srv, struct plan_work *w, const struct plan_force *f, struct shoal_err *e)
{
    struct sched_plan plan;
    json_t *detail = NULL;
    int P = w->problem.stages, D = w->problem.replicas;
    memset(&plan, 0, sizeof plan);
    if (f->stages != P || f->replicas != D) {
        err_set(e, 422, "invalid_field", "stages", "job %lld has %d stages x %d replicas and the plan gives "
                "%d stages of %d nodes", (long long)w->job_id, P, D, f->stages, f->replicas);
        goto out;
    }
    if (sched_plan_init(&plan, P, D) != 0) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto out;
    }
    for (int t = 0; t < P * D; t++) {
        plan.node[t] = -1;
        for (int i = 0; i < w->problem.n; i++)
            if (w->problem.nodes[i].id == f->node_ids[t])
                plan.node[t] = i;
        if (plan.node[t] < 0) {
            err_set(e, 422, "invalid_field", "stages", "node %lld (stage %d, replica %d) is not available: it must "
                    "be registered, idle or in this job, with a heartbeat within %ld s, not draining, and not "
                    "planned for another job", (long long)f->node_ids[t], t / D, t % D,
                    srv->cfg.heartbeat_timeout);
            goto out;
        }
    }
    if (f->layer_start) {
        memcpy(plan.layer_start, f->layer_start, (size_t)P * sizeof *plan.layer_start);
        memcpy(plan.layer_end, f->layer_end, (size_t)P * sizeof *plan.layer_end);
    }
    if ((f->layer_start ? sched_predict(&w->problem, &plan, e) : sched_evaluate(&w->problem, &plan, e)) != 0)
        goto out;
    if (!plan.cost.feasible) {
        char why[256];
        sched_memory_report(&w->problem, &plan, why, sizeof why);
        err_set(e, 422, "infeasible", "stages", "the plan does not fit the nodes' memory: %s (the shoal "
                "model's memory check)", why);
        goto out;
    }
    detail = planner_finish(srv, w, &plan, json_pack("{s:b}", "forced", 1), e);
out:
    sched_plan_free(&plan);
    return detail;
}
