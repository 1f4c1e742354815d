/* live_resume.c - a repair of a failed plan that goes on from the
 * survivors' memory (live_resume.h). */
#include "live_resume.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../store/db.h"
#include "../store/queries.h"
#include "../base/server.h"

/* True when step `step` (SQL) of job $1 was trained by its current epoch
 * and stand-ins can make it whole (planner.c stores them with a live
 * resume): every last-stage place of the plan reported it, or the next
 * replica's report carries its loss (ring_prev_loss).  The places of
 * other stages need nothing: the survivors that hold the step after it
 * finished its all-reduce, which every replica's gradients took part in. */
#define STEP_FILLABLE_SQL(step) \
    "(" step " >= (SELECT coalesce(p.resume_step, 0) FROM jobs jj JOIN plans p ON p.job_id = jj.id" \
    "   AND p.epoch = jj.plan_epoch WHERE jj.id = $1::bigint)" \
    " AND NOT EXISTS (SELECT 1 FROM jobs jj JOIN plans p ON p.job_id = jj.id AND p.epoch = jj.plan_epoch" \
    "   JOIN assignments a ON a.plan_id = p.id WHERE jj.id = $1::bigint AND a.stage = jj.stages - 1" \
    "   AND NOT EXISTS (SELECT 1 FROM job_steps x WHERE x.job_id = jj.id AND x.step = " step \
    "     AND x.stage = a.stage AND x.replica = a.replica)" \
    "   AND " PASSED_LOSS_SQL("jj.id", step, "a.stage", "a.replica", "p.replicas", "p.epoch") " IS NULL))"

/* $1 job, $2 --heartbeat-timeout s.  The failed plan's replicas and
 * tasklets: the step each one's node says it holds of that tasklet's
 * layers since the job went to recovery (null: nothing usable), and
 * whether the re-plan still waits to hear from it (alive, not left out, no
 * idle heartbeat since); which steps before a held one are whole
 * (STEP_WHOLE_SQL) or can be made whole (STEP_FILLABLE_SQL). */
#define LIVE_SURVEY_SQL \
    "WITH j AS (SELECT id, plan_epoch, recovery_started_at," \
    "   coalesce(spec->'communication'->>'sync', 'every_step') AS sync FROM jobs WHERE id = $1::bigint)," \
    " t AS (SELECT a.stage, a.replica, a.node_id, a.layer_start, a.layer_end," \
    "   CASE WHEN n.held_job_id = j.id AND n.held_layer_start = a.layer_start AND n.held_layer_end = a.layer_end" \
    "     AND n.held_at >= j.recovery_started_at THEN n.held_step END AS held_step," \
    "   n.state IN ('idle', 'busy') AND n.last_heartbeat_at > now() - make_interval(secs => $2::float8)" \
    "     AND x.node_id IS NULL AND NOT coalesce(n.held_at >= j.recovery_started_at, false) AS pending" \
    "   FROM j JOIN plans p ON p.job_id = j.id AND p.epoch = j.plan_epoch" \
    "   JOIN assignments a ON a.plan_id = p.id JOIN nodes n ON n.id = a.node_id" \
    "   LEFT JOIN job_excluded_nodes($1::bigint, (SELECT plan_epoch FROM jobs WHERE id = $1::bigint)) x" \
    "     ON x.node_id = a.node_id)" \
    " SELECT json_build_object('sync', j.sync," \
    "   'replicas', (SELECT replicas FROM plans WHERE job_id = j.id AND epoch = j.plan_epoch)," \
    "   'age_s', coalesce(extract(epoch FROM now() - j.recovery_started_at), 1e9)," \
    "   'tasklets', (SELECT coalesce(json_agg(json_build_object('stage', t.stage, 'replica', t.replica," \
    "     'node', t.node_id, 'layer_start', t.layer_start, 'layer_end', t.layer_end, 'held_step', t.held_step," \
    "     'pending', t.pending)), '[]') FROM t)," \
    "   'whole', (SELECT coalesce(json_agg(s.step), '[]') FROM (SELECT DISTINCT held_step - 1 AS step FROM t" \
    "     WHERE held_step > 0) s WHERE " STEP_WHOLE_SQL("$1::bigint", "s.step") " OR " STEP_FILLABLE_SQL("s.step") "))" \
    " FROM j"

/* The failed plan as a grid: per place (stage * D + replica) the node's
 * index among the problem's nodes (-1: gone or left out) and the step it
 * holds (-1: none). */
struct grid {
    int S, D;
    int *node;
    int64_t *held;
    int *layer_start, *layer_end;   /* [stage] */
};

static int node_index(const struct sched_problem *pb, int64_t id)
{
    for (int i = 0; i < pb->n; i++)
        if (pb->nodes[i].id == id)
            return i;
    return -1;
}

static int in_list(const json_t *ids, int64_t id)
{
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v)
        if (json_integer_value(v) == id)
            return 1;
    return 0;
}

/* The latest step every stage has a survivor holding and whose step
 * before is whole (in `whole`; NULL: whether or not), later than `after`;
 * -1: none. */
static int64_t common_step(const struct grid *g, const json_t *whole, int64_t after, int64_t total)
{
    int64_t best = -1;
    for (int c = 0; c < g->S * g->D; c++) {
        int64_t s = g->held[c];
        if (s <= after || s > total || s <= best)   /* total: trained, its final checkpoint still to store */
            continue;
        if (s > 0 && whole && !in_list(whole, s - 1))
            continue;
        int every = 1;
        for (int st = 0; st < g->S && every; st++) {
            int has = 0;
            for (int r = 0; r < g->D; r++)
                has |= g->held[st * g->D + r] == s;
            every = has;
        }
        if (every)
            best = s;
    }
    return best;
}

/* Puts at place c of p the node, among those `taken` does not mark, that
 * makes the predicted step cheapest; the node there stays when none is
 * cheaper.  Returns the node at c, or -1 with e set. */
static int cheapest_at(const struct sched_problem *pb, struct sched_plan *p, int c, const char *taken,
                       struct shoal_err *e)
{
    int best = p->node[c];
    if (sched_predict(pb, p, e) != 0)
        return -1;
    double best_s = p->cost.feasible ? p->cost.total_s : INFINITY;
    for (int i = 0; i < pb->n; i++) {
        if (taken[i] || i == best)
            continue;
        p->node[c] = i;
        if (sched_predict(pb, p, e) != 0) {
            p->node[c] = best;
            return -1;
        }
        if (p->cost.feasible && p->cost.total_s < best_s) {
            best_s = p->cost.total_s;
            best = i;
        }
        p->node[c] = best;
    }
    return best;
}

/* Fills the empty places of p (node -1) with unused nodes, each the one
 * that makes the predicted step cheapest.  Returns 0, 1 when there are too
 * few nodes, or -1 with e set. */
static int fill_spares(const struct sched_problem *pb, struct sched_plan *p, struct shoal_err *e)
{
    int cells = p->stages * p->replicas, rc = -1;
    char *used = calloc((size_t)pb->n + 1, 1);
    int *empty = calloc((size_t)cells + 1, sizeof *empty), n_empty = 0;
    if (!used || !empty) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto out;
    }
    for (int c = 0; c < cells; c++) {
        if (p->node[c] >= 0)
            used[p->node[c]] = 1;
        else
            empty[n_empty++] = c;
    }
    /* first whatever is free, so that every plan costed is whole */
    for (int k = 0, i = 0; k < n_empty; k++) {
        while (i < pb->n && used[i])
            i++;
        if (i == pb->n) {
            rc = 1;
            goto out;
        }
        p->node[empty[k]] = i;
        used[i] = 1;
    }
    for (int k = 0; k < n_empty; k++) {
        int was = p->node[empty[k]], now = cheapest_at(pb, p, empty[k], used, e);
        if (now < 0)
            goto out;
        used[was] = 0;
        used[now] = 1;
    }
    rc = 0;
out:
    free(used);
    free(empty);
    return rc;
}

/* Why no offer, logged; returns 0. */
static int no_offer(int64_t job, const char *why)
{
    log_info("recovery: job %lld resumes from a checkpoint, not from its survivors: %s", (long long)job, why);
    return 0;
}

/* Places the survivors of grid g in plan p of D = p->replicas replicas
 * (the problem's: g's, or fewer when nodes are short, planner.h): per
 * stage those that hold `step` first, then the others, in replica order,
 * at most D; the places left get -1.  holds[c]: the node at place c holds
 * `step`. */
static void place_survivors(const struct grid *g, int64_t step, struct sched_plan *p, char *holds)
{
    int D = p->replicas;
    for (int st = 0; st < g->S; st++) {
        int r = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int old = 0; old < g->D && r < D; old++) {
                int c = st * g->D + old;
                if (g->node[c] < 0 || (g->held[c] == step) != (pass == 0))
                    continue;
                holds[st * D + r] = pass == 0;
                p->node[st * D + r++] = g->node[c];
            }
        for (; r < D; r++) {
            holds[st * D + r] = 0;
            p->node[st * D + r] = -1;
        }
    }
}

/* With fewer places than survivors that hold `step` (the re-plan trains
 * fewer replicas), swaps in, place by place, the unplaced holder of the
 * same stage that makes the predicted step cheapest: which survivors stay
 * is a choice like the spares'.  Returns 0, or -1 with e set. */
static int cheapest_holders(const struct sched_problem *pb, const struct grid *g, int64_t step, struct sched_plan *p,
                            const char *holds, struct shoal_err *e)
{
    int D = p->replicas, rc = -1;
    char *taken = malloc((size_t)pb->n + 1);   /* not a candidate for the place at hand */
    if (!taken)
        return err_set(e, 500, "internal", NULL, "out of memory");
    for (int c = 0; c < g->S * D; c++) {
        int st = c / D;
        if (!holds[c])
            continue;
        memset(taken, 1, (size_t)pb->n);
        for (int old = 0; old < g->D; old++)
            if (g->node[st * g->D + old] >= 0 && g->held[st * g->D + old] == step)
                taken[g->node[st * g->D + old]] = 0;
        for (int k = 0; k < g->S * D; k++)
            if (p->node[k] >= 0)
                taken[p->node[k]] = 1;
        if (cheapest_at(pb, p, c, taken, e) < 0)
            goto out;
    }
    rc = 0;
out:
    free(taken);
    return rc;
}

/* The repair of grid g at step `step` with the problem's replicas, or
 * NULL with *why or e set. */
static struct plan_repair *repair_make(const struct sched_problem *pb, const struct grid *g, int64_t step,
                                       const char **why, struct shoal_err *e)
{
    struct plan_repair *r = calloc(1, sizeof *r);
    int D = pb->replicas, ok = 0;
    char *holds = malloc((size_t)(g->S * D));
    if (!r || !holds || !(r->roots = calloc((size_t)g->S, sizeof *r->roots)) ||
        sched_plan_init(&r->plan, g->S, D) != 0) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto out;
    }
    r->step = step;
    place_survivors(g, step, &r->plan, holds);
    memcpy(r->plan.layer_start, g->layer_start, (size_t)g->S * sizeof *g->layer_start);
    memcpy(r->plan.layer_end, g->layer_end, (size_t)g->S * sizeof *g->layer_end);
    int filled = fill_spares(pb, &r->plan, e);
    if (filled != 0) {
        *why = filled > 0 ? "too few spare nodes to fill the places of the nodes that are gone" : NULL;
        goto out;
    }
    if (cheapest_holders(pb, g, step, &r->plan, holds, e) != 0)
        goto out;
    /* The root hands its state to the others over the stage's TCP ring or
     * its NCCL group, whichever the stage sums over (agent/train/live.h). */
    for (int st = 0; st < g->S; st++) {
        int all = 1;
        r->roots[st] = -1;
        for (int rp = D - 1; rp >= 0; rp--) {
            int c = st * D + rp;
            all &= holds[c];
            if (holds[c])
                r->roots[st] = rp;   /* the lowest replica that holds it */
        }
        if (all)
            r->roots[st] = -1;
    }
    ok = 1;
out:
    free(holds);
    if (!ok && r) {
        sched_plan_free(&r->plan);
        free(r->roots);
        free(r);
        r = NULL;
    }
    return r;
}

int live_resume_offer(struct server *srv, int64_t job, struct plan_work *w, char *waiting, size_t len,
                      struct shoal_err *e)
{
    const struct sched_problem *pb = planner_repair_problem(w);
    struct grid g = { .S = pb->stages };
    char p_job[24], p_timeout[32];
    const char *params[] = { db_param_i64(p_job, job), db_param_f64(p_timeout, (double)srv->cfg.heartbeat_timeout) };
    const char *why = NULL;
    int rc = -1, pending = 0;
    json_t *sv = db_query_json(srv->db, LIVE_SURVEY_SQL, 2, params, "job", e);
    if (!sv)
        return -1;
    json_t *tasklets = json_object_get(sv, "tasklets");
    g.D = (int)json_integer_value(json_object_get(sv, "replicas"));
    int cells = g.S * (g.D > 0 ? g.D : 1);
    g.node = malloc((size_t)cells * sizeof *g.node);
    g.held = malloc((size_t)cells * sizeof *g.held);
    g.layer_start = malloc((size_t)g.S * sizeof *g.layer_start);
    g.layer_end = malloc((size_t)g.S * sizeof *g.layer_end);
    if (!g.node || !g.held || !g.layer_start || !g.layer_end) {
        err_set(e, 500, "internal", NULL, "out of memory");
        goto out;
    }
    rc = 0;
    if (strcmp(json_string_value(json_object_get(sv, "sync")), "every_step") != 0) {
        rc = no_offer(job, "its replicas differ between diloco's outer steps");
        goto out;
    }
    if (g.D < 1 || (int)json_array_size(tasklets) != g.S * g.D) {
        rc = no_offer(job, "its failed plan has another shape");
        goto out;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tasklets, i, t) {
        int st = (int)json_integer_value(json_object_get(t, "stage"));
        int rp = (int)json_integer_value(json_object_get(t, "replica"));
        json_t *held = json_object_get(t, "held_step");
        if (st < 0 || st >= g.S || rp < 0 || rp >= g.D) {
            rc = no_offer(job, "its failed plan has another shape");
            goto out;
        }
        int c = st * g.D + rp;
        g.layer_start[st] = (int)json_integer_value(json_object_get(t, "layer_start"));
        g.layer_end[st] = (int)json_integer_value(json_object_get(t, "layer_end"));
        g.node[c] = node_index(pb, json_integer_value(json_object_get(t, "node")));
        g.held[c] = g.node[c] >= 0 && json_is_integer(held) ? json_integer_value(held) : -1;
        pending += json_is_true(json_object_get(t, "pending"));
    }
    if (pending > 0 && json_number_value(json_object_get(sv, "age_s")) < LIVE_WAIT_S) {
        snprintf(waiting, len, "what its %d surviving tasklet%s hold%s for a live resume (at most %.0f s)", pending,
                 pending == 1 ? "" : "s", pending == 1 ? "s" : "", LIVE_WAIT_S);
        rc = 1;
        goto out;
    }
    /* A failure through the relay (it restarts, say): a re-plan while it
     * is down would price the survivors' relayed links as unusable, and
     * any plan's relayed links would fail again; a relay that answers
     * again makes those links usable (planner_repair_problem). */
    if (planner_relay_down(w) && json_number_value(json_object_get(sv, "age_s")) < LIVE_WAIT_S) {
        snprintf(waiting, len, "the %s, for a live resume (at most %.0f s)", planner_relay_down(w), LIVE_WAIT_S);
        rc = 1;
        goto out;
    }
    int64_t step = common_step(&g, json_object_get(sv, "whole"), planner_resume_step(w),
                               planner_total_steps(w));
    /* The survivors say what they hold as soon as their tasklets stop, and
     * their reports of the step before may still be on the way (another
     * thread of the agent sends them): wait for those too. */
    if (step < 0 && json_number_value(json_object_get(sv, "age_s")) < LIVE_WAIT_S &&
        common_step(&g, NULL, planner_resume_step(w), planner_total_steps(w)) >= 0) {
        snprintf(waiting, len, "the survivors' reports of the step before the one they hold, for a live resume "
                 "(at most %.0f s)", LIVE_WAIT_S);
        rc = 1;
        goto out;
    }
    if (step < 0) {
        rc = no_offer(job, "no step later than its checkpoint is held by a survivor of every stage and reported "
                      "by every tasklet");
        goto out;
    }
    struct plan_repair *r = repair_make(pb, &g, step, &why, e);
    if (!r) {
        rc = why ? no_offer(job, why) : -1;
        goto out;
    }
    planner_offer_repair(w, r);
    log_info("recovery: job %lld may go on from its survivors at step %lld", (long long)job, (long long)step);
out:
    free(g.node);
    free(g.held);
    free(g.layer_start);
    free(g.layer_end);
    json_decref(sv);
    return rc;
}
