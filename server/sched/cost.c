/* cost.c - the two cost models, for a candidate partition (cached, updated
 * per moved group) and for a complete plan.  Formulas: README.md here. */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* AdamW touches every parameter a few times and is bound by memory, not
 * matmul speed: ~12 FLOP per parameter at 5% of the measured matmul rate. */
#define OPT_FLOP_PER_PARAM 12.0
#define OPT_EFFICIENCY 0.05

/* One-way transfer time of `bytes` from i to j: latency plus serialisation, s. */
static double xfer_s(const struct sched_problem *pb, int i, int j, double bytes)
{
    return pb->latency_ms[i * pb->n + j] / 1000.0 + bytes * 8.0 / (pb->bandwidth_gbps[i * pb->n + j] * 1e9);
}

/* The two ends of a pipeline sum a tied matrix's gradient as a ring of
 * two (agent/net/ring.c): each sends half of it twice, both directions at
 * once, so the slower direction's bandwidth and latency set the time. */
static double tied_exchange_s(const struct sched_problem *pb, int x, int y, double bytes)
{
    double there = xfer_s(pb, x, y, bytes / 2), back = xfer_s(pb, y, x, bytes / 2);
    return 2.0 * (there > back ? there : back);
}

struct model_config sched_model_family(const struct sched_model *m)
{
    struct model_config f = {.vocab = (int)m->vocab_size, .context = (int)m->context_length,
                             .d_model = (int)m->d_model, .heads = (int)m->heads, .layers = (int)m->layers,
                             .arch = m->arch, .kv_heads = (int)m->kv_heads, .ffn_dim = (int)m->ffn_dim,
                             .head_dim = (int)m->head_dim, .sliding_window = (int)m->sliding_window,
                             .tied = m->tied};
    model_config_normalise(&f);
    return f;
}

int ctx_init(struct sched_ctx *cx, const struct sched_problem *pb)
{
    memset(cx, 0, sizeof *cx);
    int n = pb->n;
    cx->pb = pb;
    cx->n = n;
    cx->P = pb->stages;
    cx->D = pb->replicas;
    cx->spares = n - cx->P * cx->D;
    const struct sched_model *m = &pb->model;
    struct model_config f = sched_model_family(m);
    double C = (double)m->d_model, T = (double)m->context_length, V = (double)m->vocab_size;
    double tokens = (double)m->micro_batch_size * T;
    /* Counts from the family's row (common/model.c): gpt2's block is
     * 12 C^2 + 13 C parameters and 72 C^2 + 6 C T FLOPs a token. */
    cx->layer_params = (double)model_part_params(&f, MODEL_BLOCK);
    cx->first_params = (double)model_part_params(&f, MODEL_EMBED);
    cx->last_params = (double)model_part_params(&f, MODEL_HEAD);
    cx->layer_flops = tokens * model_flops_per_token(&f, 1, 0, T);
    cx->last_flops = tokens * (model_flops_per_token(&f, 0, 1, T));
    cx->layer_act_bytes = tokens * model_block_act_values(&f, T) * m->act_bytes;
    cx->last_act_bytes = tokens * V * 4.0 * 2.0;
    cx->boundary_bytes = tokens * C * (m->wire_bytes > 0 ? m->wire_bytes : m->act_bytes);
    cx->sync_bytes = m->sync_bytes > 0 ? m->sync_bytes : 4.0;
    cx->sync_every = m->sync_every > 0 ? m->sync_every : 1;
    /* a tied head split from its embedding: its f32 gradient summed by
     * the two ends of each replica's pipeline, every step */
    cx->tied_bytes = cx->P > 1 ? 4.0 * (double)model_tied_params(&f) : 0;

    cx->pp = malloc(sizeof(double) * (size_t)n * (size_t)n);
    cx->dp = malloc(sizeof(double) * (size_t)n * (size_t)n);
    cx->mw = malloc(sizeof *cx->mw);
    cx->pw = path_work_new(cx->P);
    cx->wbuf = malloc(sizeof(double) * (size_t)cx->D * (size_t)(cx->D + 1));
    cx->ibuf = malloc(sizeof(int) * (size_t)(2 * n + cx->P * cx->D));
    cx->near = malloc(sizeof(int) * (size_t)n * NEAR_MAX);
    cx->ebuf = malloc(sizeof(double) * (size_t)cx->P * (size_t)cx->P);
    if (!cx->pp || !cx->dp || !cx->mw || !cx->pw || !cx->wbuf || !cx->ibuf || !cx->near || !cx->ebuf) {
        ctx_free(cx);
        return -1;
    }
    memset(cx->mw, 0, sizeof *cx->mw);
    cx->near_k = n - 1 < NEAR_MAX ? n - 1 : NEAR_MAX;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            if (i == j) {
                cx->pp[i * n + j] = cx->dp[i * n + j] = 0;
                continue;
            }
            double lat = pb->latency_ms[i * n + j] / 1000.0, bw = pb->bandwidth_gbps[i * n + j];
            double back_lat = pb->latency_ms[j * n + i] / 1000.0, back_bw = pb->bandwidth_gbps[j * n + i];
            cx->dp[i * n + j] = 2.0 * (lat + pb->c_dp_gb * 8.0 / (bw * cx->D));
            /* Activations go one way and their gradients come back: the mean of
             * both directions (the paper's matrices are symmetric anyway). */
            if (pb->cost == SCHED_COST_DTFM)
                cx->pp[i * n + j] = (lat + pb->c_pp_gb * 8.0 / bw + back_lat + pb->c_pp_gb * 8.0 / back_bw) / 2.0;
            else
                cx->pp[i * n + j] = (xfer_s(pb, i, j, cx->boundary_bytes) + xfer_s(pb, j, i, cx->boundary_bytes)) / 2.0;
        }
    }
    /* Each node's nearest others: insertion into a sorted list of near_k. */
    for (int i = 0; i < n; i++) {
        int *list = cx->near + (size_t)i * NEAR_MAX, have = 0;
        for (int j = 0; j < n; j++) {
            if (j == i)
                continue;
            double v = cx->pp[i * n + j];
            if (have == cx->near_k && v >= cx->pp[i * n + list[have - 1]])
                continue;
            int k = have < cx->near_k ? have++ : have - 1;
            while (k > 0 && cx->pp[i * n + list[k - 1]] > v) {
                list[k] = list[k - 1];
                k--;
            }
            list[k] = j;
        }
    }
    return 0;
}

void ctx_free(struct sched_ctx *cx)
{
    free(cx->pp);
    free(cx->dp);
    free(cx->mw);
    path_work_free(cx->pw);
    free(cx->wbuf);
    free(cx->ibuf);
    free(cx->near);
    free(cx->ebuf);
    memset(cx, 0, sizeof *cx);
}

int cand_alloc(struct cand *c, const struct sched_ctx *cx)
{
    size_t P = (size_t)cx->P, D = (size_t)cx->D;
    memset(c, 0, sizeof *c);
    c->member = malloc(sizeof(int) * (size_t)cx->n);
    c->pos = malloc(sizeof(int) * (size_t)cx->n);
    c->group_dp = calloc(P, sizeof(double));
    c->group_lat = calloc(P, sizeof(double));
    c->edge = calloc(P * P, sizeof(double));
    c->pairing = calloc(P * P * D, sizeof(int));
    c->order = calloc(P, sizeof(int));
    c->edge_node = calloc(P * P, sizeof(int));
    c->edge_soft = calloc(P * P, sizeof(double));
    if (!c->member || !c->pos || !c->group_dp || !c->group_lat || !c->edge || !c->pairing || !c->order ||
        !c->edge_node || !c->edge_soft) {
        cand_free(c);
        return -1;
    }
    return 0;
}

void cand_free(struct cand *c)
{
    free(c->member);
    free(c->pos);
    free(c->group_dp);
    free(c->group_lat);
    free(c->edge);
    free(c->pairing);
    free(c->order);
    free(c->edge_node);
    free(c->edge_soft);
    memset(c, 0, sizeof *c);
}

void cand_copy(struct cand *dst, const struct cand *src, const struct sched_ctx *cx)
{
    size_t n = (size_t)cx->n, P = (size_t)cx->P, D = (size_t)cx->D;
    memcpy(dst->member, src->member, sizeof(int) * n);
    memcpy(dst->pos, src->pos, sizeof(int) * n);
    memcpy(dst->group_dp, src->group_dp, sizeof(double) * P);
    memcpy(dst->group_lat, src->group_lat, sizeof(double) * P);
    memcpy(dst->edge, src->edge, sizeof(double) * P * P);
    memcpy(dst->pairing, src->pairing, sizeof(int) * P * P * D);
    memcpy(dst->order, src->order, sizeof(int) * P);
    memcpy(dst->edge_node, src->edge_node, sizeof(int) * P * P);
    memcpy(dst->edge_soft, src->edge_soft, sizeof(double) * P * P);
    dst->cost = src->cost;
    dst->tie = src->tie;
    dst->crit = src->crit;
}

/* dtfm DP cost of the D nodes at `g`: max over d of the sum of its terms. */
static double group_dp_dtfm(const struct sched_ctx *cx, const int *g)
{
    double worst = 0;
    for (int a = 0; a < cx->D; a++) {
        double sum = 0;
        for (int b = 0; b < cx->D; b++)
            if (a != b)
                sum += cx->dp[g[a] * cx->n + g[b]];
        if (sum > worst)
            worst = sum;
    }
    return worst;
}

/* shoal: the ring all-reduce path through the D nodes at `g`, built greedily
 * (next hop = the unvisited node with the fastest link, ties to the lower
 * node index) from the lowest node index, so the ring depends only on which
 * nodes are in the group, not on their order.  Writes the ring's slowest
 * bandwidth (Gbit/s) and worst latency (ms). */
static void group_ring(const struct sched_ctx *cx, const int *g, double *ring_bw, double *ring_lat)
{
    const struct sched_problem *pb = cx->pb;
    int n = cx->n, D = cx->D;
    int *used = cx->ibuf;   /* D flags */
    memset(used, 0, sizeof(int) * (size_t)D);
    int first = 0;
    for (int k = 1; k < D; k++)
        if (g[k] < g[first])
            first = k;
    double bw = DBL_MAX, lat = 0;
    int cur = first;
    used[first] = 1;
    for (int step = 1; step <= D; step++) {
        int next = first;   /* the last hop closes the ring */
        if (step < D) {
            next = -1;
            for (int k = 0; k < D; k++) {
                if (used[k])
                    continue;
                double b = pb->bandwidth_gbps[g[cur] * n + g[k]];
                double best = next < 0 ? -1 : pb->bandwidth_gbps[g[cur] * n + g[next]];
                if (next < 0 || b > best || (b == best && g[k] < g[next]))
                    next = k;
            }
            used[next] = 1;
        }
        if (D > 1) {
            double b = pb->bandwidth_gbps[g[cur] * n + g[next]], l = pb->latency_ms[g[cur] * n + g[next]];
            if (b < bw) bw = b;
            if (l > lat) lat = l;
        }
        cur = next;
    }
    *ring_bw = D > 1 ? bw : DBL_MAX;
    *ring_lat = lat;
}

static void group_eval(const struct sched_ctx *cx, struct cand *c, int g)
{
    const int *members = c->member + g * cx->D;
    if (cx->pb->cost == SCHED_COST_DTFM)
        c->group_dp[g] = group_dp_dtfm(cx, members);
    else
        group_ring(cx, members, &c->group_dp[g], &c->group_lat[g]);
}

/* The D x D costs between the members of groups g and h, into `w`. */
static void gather_link(const struct sched_ctx *cx, const struct cand *c, int g, int h, double *w)
{
    int D = cx->D, n = cx->n;
    const int *a = c->member + g * D, *b = c->member + h * D;
    for (int i = 0; i < D; i++) {
        const double *row = cx->pp + (size_t)a[i] * (size_t)n;
        for (int j = 0; j < D; j++)
            w[i * D + j] = row[b[j]];
    }
}

/* Row and column minima of `w` (each node's best partner), in simple
 * loops the compiler vectorises: returns the largest (a lower bound of the
 * bottleneck matching) and writes their sum to `*sum`; `cmin` is D scratch. */
static double link_minima(const double *w, int D, double *cmin, double *sum)
{
    double lb = -DBL_MAX, total = 0;
    memcpy(cmin, w, sizeof(double) * (size_t)D);
    for (int i = 0; i < D; i++) {
        const double *wi = w + i * D;
        double rmin = wi[0];
        for (int j = 1; j < D; j++)
            rmin = wi[j] < rmin ? wi[j] : rmin;
        for (int j = 0; j < D; j++)
            cmin[j] = wi[j] < cmin[j] ? wi[j] : cmin[j];
        total += rmin;
        lb = rmin > lb ? rmin : lb;
    }
    for (int j = 0; j < D; j++) {
        total += cmin[j];
        lb = cmin[j] > lb ? cmin[j] : lb;
    }
    *sum = total;
    return lb;
}

/* Bottleneck matching between groups g < h; caches cost and pairing. */
static void edge_eval(const struct sched_ctx *cx, struct cand *c, int g, int h)
{
    int D = cx->D, P = cx->P;
    if (g > h) { int t = g; g = h; h = t; }
    const int *a = c->member + g * D, *b = c->member + h * D;
    double *w = cx->wbuf, soft;
    gather_link(cx, c, g, h, w);
    double lb = link_minima(w, D, cx->wbuf + D * D, &soft);
    int *pair = c->pairing + (size_t)(g * P + h) * (size_t)D, worst = 0;
    double v = match_bottleneck_bound(w, D, lb, pair, pair, cx->mw);
    c->edge[g * P + h] = c->edge[h * P + g] = v;
    for (int i = 1; i < D; i++)
        if (w[i * D + pair[i]] > w[worst * D + pair[worst]])
            worst = i;
    c->edge_node[g * P + h] = a[worst];
    c->edge_node[h * P + g] = b[pair[worst]];
    /* the mean cost of each node's best partner in the other group */
    c->edge_soft[g * P + h] = c->edge_soft[h * P + g] = soft / (2.0 * D);
}

/* Writes the plan of candidate `c` with stage order c->order into
 * node[stage * D + replica], chaining replicas through the pairings. */
static void cand_nodes(const struct sched_ctx *cx, const struct cand *c, int *node)
{
    int P = cx->P, D = cx->D;
    int *local = cx->ibuf + cx->n;   /* D: member index of each replica in the current group */
    for (int r = 0; r < D; r++)
        local[r] = r;
    for (int s = 0; s < P; s++) {
        int g = c->order[s];
        for (int r = 0; r < D; r++)
            node[s * D + r] = c->member[g * D + local[r]];
        if (s + 1 == P)
            break;
        int h = c->order[s + 1];
        const int *pr = c->pairing + (size_t)((g < h ? g : h) * P + (g < h ? h : g)) * (size_t)D;
        for (int r = 0; r < D; r++) {
            if (g < h) {
                local[r] = pr[local[r]];
            } else {
                int j = 0;
                while (pr[j] != local[r])
                    j++;
                local[r] = j;
            }
        }
    }
}

/* shoal: layers per stage, balancing compute under each group's memory.
 * Gives every stage one layer, then each next layer to the stage whose time
 * would grow least, never past a stage's memory cap.  Returns the shortfall
 * (layers that do not fit anywhere, plus stages that cannot hold one).
 * With `given`, `layers` is given (a forced plan's split) and the shortfall
 * is the layers past each stage's cap. */
static double shoal_layers(const struct sched_ctx *cx, const int *node, int *layers, int given)
{
    const struct sched_problem *pb = cx->pb;
    int P = cx->P, D = cx->D, L = (int)pb->model.layers;
    int64_t M = pb->model.micro_batches;
    double speed[P], cap[P];
    double shortfall = 0, total_cap = 0;
    for (int s = 0; s < P; s++) {
        double sp = DBL_MAX, mem = DBL_MAX;
        for (int r = 0; r < D; r++) {
            const struct sched_node *nd = &pb->nodes[node[s * D + r]];
            if (nd->tflops < sp) sp = nd->tflops;
            if (nd->mem_bytes < mem) mem = nd->mem_bytes;
        }
        speed[s] = sp;
        double stash = pb->model.schedule == SCHED_GPIPE ? (double)M : (double)(M < P - s ? M : P - s);
        double fixed_bytes = ((s == 0 ? cx->first_params : 0) + (s == P - 1 ? cx->last_params : 0))
                               * (double)MODEL_STATE_BYTES_PER_PARAM
                           + (s == P - 1 ? cx->last_act_bytes : 0);
        double per_layer = cx->layer_params * (double)MODEL_STATE_BYTES_PER_PARAM + stash * cx->layer_act_bytes;
        cap[s] = floor((mem - fixed_bytes) / per_layer);
        if (given) {
            shortfall += layers[s] > cap[s] ? layers[s] - (cap[s] < -1e6 ? -1e6 : cap[s]) : 0;
            continue;
        }
        if (cap[s] < 1) {
            shortfall += 1 - (cap[s] < -1e6 ? -1e6 : cap[s]);
            cap[s] = 1;
        }
        total_cap += cap[s];
        layers[s] = 1;
    }
    if (given)
        return shortfall;
    if (total_cap < L)
        shortfall += L - total_cap;
    for (int left = L - P; left > 0; left--) {
        int best = -1;
        double best_t = DBL_MAX;
        for (int s = 0; s < P; s++) {
            if (layers[s] >= cap[s] && shortfall == 0)
                continue;
            double t = ((layers[s] + 1) * cx->layer_flops + (s == P - 1 ? cx->last_flops : 0)) / speed[s];
            if (t < best_t) {
                best_t = t;
                best = s;
            }
        }
        if (best < 0)   /* every stage infinitely slow: cannot happen past sched_problem_check */
            best = P - 1;
        layers[best]++;
    }
    return shortfall;
}

/* shoal: predicted iteration time of a complete plan (see server/sched/README.md).
 * The server's straggler check repeats a tasklet's compute and AdamW terms
 * (with ctx_init's counts) in SQL, predicted_compute_s of
 * job_tasklets_measured in sql/017_read_models.sql: change both together
 * (a new migration). */
/* What the search steers by besides the total: the sums behind its maxima
 * (the all-reduce of every stage, the pipeline time of every replica), and
 * the stage whose all-reduce is the longest. */
struct shoal_terms {
    double allreduce_sum, pipeline_sum;   /* s */
    int slowest_sync;                     /* stage */
};

static double shoal_cost(const struct sched_ctx *cx, const int *node, const double *ring_bw,
                         const double *ring_lat, int *layers, int layers_given, struct sched_breakdown *bd,
                         struct shoal_terms *terms)
{
    struct shoal_terms local;
    if (!terms)
        terms = &local;
    memset(terms, 0, sizeof *terms);
    const struct sched_problem *pb = cx->pb;
    int P = cx->P, D = cx->D;
    double M = (double)pb->model.micro_batches;
    double shortfall = shoal_layers(cx, node, layers, layers_given);
    double pipeline = 0, crit_compute = 0, crit_comm = 0, optimizer = 0, allreduce = 0, tied = 0;
    int one_f_one_b = pb->model.schedule == SCHED_1F1B;
    double step[2 * P];   /* one micro-batch's path: stage s at [2s], the link s -> s+1 both ways at [2s+1] */
    for (int r = 0; r < D; r++) {
        double sum = 0, worst = 0, comm = 0, worst_compute = 0;
        for (int s = 0; s < P; s++) {
            int x = node[s * D + r];
            double flops = layers[s] * cx->layer_flops + (s == P - 1 ? cx->last_flops : 0);
            double t = flops / (pb->nodes[x].tflops * 1e12);
            step[2 * s] = t;
            step[2 * s + 1] = 0;
            sum += t;
            if (t > worst) worst = t;
            if (t > worst_compute) worst_compute = t;
            if (s + 1 < P) {
                int y = node[(s + 1) * D + r];
                double f = xfer_s(pb, x, y, cx->boundary_bytes), b = xfer_s(pb, y, x, cx->boundary_bytes);
                step[2 * s + 1] = f + b;
                sum += f + b;
                comm += f + b;
                /* GPipe sends every activation before the first gradient
                 * comes back: a link carries one direction at a time.
                 * Under 1F1B both directions are busy at once. */
                double busy = one_f_one_b ? (f > b ? f : b) : f + b;
                if (busy > worst) worst = busy;
            }
        }
        /* 1F1B holds at most min(M, P - s) micro-batches in flight at stage
         * s, each for a round trip through the stages after it: the pace
         * is at most that many per round trip. */
        if (one_f_one_b) {
            double round_trip = 0;
            for (int s = P - 1; s >= 0; s--) {
                round_trip += step[2 * s] + step[2 * s + 1];
                double in_flight = M < P - s ? M : P - s;
                if (round_trip / in_flight > worst) worst = round_trip / in_flight;
            }
        }
        double t_r = sum + (M - 1) * worst;
        terms->pipeline_sum += t_r;
        if (t_r > pipeline) {
            pipeline = t_r;
            crit_compute = M * worst_compute;
            crit_comm = comm;
        }
        if (cx->tied_bytes > 0) {
            double x = tied_exchange_s(pb, node[r], node[(P - 1) * D + r], cx->tied_bytes);
            terms->allreduce_sum += x;
            if (x > tied)
                tied = x;
        }
    }
    for (int s = 0; s < P; s++) {
        double params = layers[s] * cx->layer_params + (s == 0 ? cx->first_params : 0) + (s == P - 1 ? cx->last_params : 0);
        if (D > 1) {
            /* the ring's bytes and hops, once every sync_every steps (diloco's H) */
            double ar = (2.0 * (D - 1) / D * params * cx->sync_bytes * 8.0 / (ring_bw[s] * 1e9)
                         + 2.0 * (D - 1) * ring_lat[s] / 1000.0) / cx->sync_every;
            terms->allreduce_sum += ar;
            if (ar > allreduce) {
                allreduce = ar;
                terms->slowest_sync = s;
            }
        }
        for (int r = 0; r < D; r++) {
            double o = params * OPT_FLOP_PER_PARAM / (pb->nodes[node[s * D + r]].tflops * 1e12 * OPT_EFFICIENCY);
            if (o > optimizer) optimizer = o;
        }
    }
    double total = pipeline + tied + allreduce + optimizer;
    if (bd) {
        bd->dp_s = tied + allreduce;
        bd->pipeline_s = pipeline;
        bd->compute_s = crit_compute;
        bd->comm_s = crit_comm;
        bd->bubble_s = pipeline - crit_compute > 0 ? pipeline - crit_compute : 0;
        bd->optimizer_s = optimizer;
        bd->feasible = shortfall == 0;
        bd->total_s = shortfall > 0 ? SCHED_INFEASIBLE_S + shortfall : total;
    }
    return shortfall > 0 ? SCHED_INFEASIBLE_S + shortfall : total;
}

/* Totals the cost of the candidate in its current stage order. */
static void cand_total(const struct sched_ctx *cx, struct cand *c)
{
    int P = cx->P;
    double path = path_cost(c->edge, P, c->order);
    double edges = 0;
    for (int g = 0; g < P; g++)
        for (int h = g + 1; h < P; h++)
            edges += c->edge[g * P + h] + c->edge_soft[g * P + h];
    if (cx->pb->cost == SCHED_COST_DTFM) {
        double worst = 0, sum = 0;
        for (int g = 0; g < P; g++) {
            if (c->group_dp[g] > worst) worst = c->group_dp[g];
            sum += c->group_dp[g];
        }
        c->cost = worst + 2.0 * path;
        c->tie = sum + edges;
        for (int g = 0; g < P; g++)
            if (c->group_dp[g] == worst)
                c->crit = g;
        return;
    }
    int *node = cx->ibuf + cx->n + cx->D;   /* P*D */
    int layers[P];
    double ring_bw[P], ring_lat[P], inv_bw = 0;
    for (int s = 0; s < P; s++) {
        ring_bw[s] = c->group_dp[c->order[s]];
        ring_lat[s] = c->group_lat[c->order[s]];
        inv_bw += 1.0 / ring_bw[s];
    }
    cand_nodes(cx, c, node);
    struct shoal_terms terms;
    c->cost = shoal_cost(cx, node, ring_bw, ring_lat, layers, 0, NULL, &terms);
    c->tie = terms.allreduce_sum + terms.pipeline_sum / cx->D + 1e-3 * (edges + inv_bw);
    c->crit = c->order[terms.slowest_sync];
}

/* A tied head closes the pipeline into a cycle: its ends exchange the
 * head's gradient as its neighbours exchange activations.  Tries every
 * place to open the path's cycle, both ways round, and keeps the
 * cheapest (the path's edges know only the activations). */
static void cycle_best(const struct sched_ctx *cx, struct cand *c)
{
    int P = cx->P, cycle[P], best[P];
    double best_cost = c->cost, best_tie = c->tie;
    int best_crit = c->crit;
    memcpy(cycle, c->order, sizeof cycle);
    memcpy(best, c->order, sizeof best);
    for (int way = 0; way < 2; way++)
        for (int start = 0; start < P; start++) {
            for (int s = 0; s < P; s++)
                c->order[s] = cycle[way ? (start - s + P) % P : (start + s) % P];
            cand_total(cx, c);
            if (c->cost < best_cost - 1e-12 || (c->cost <= best_cost + 1e-12 && c->tie < best_tie)) {
                memcpy(best, c->order, sizeof best);
                best_cost = c->cost;
                best_tie = c->tie;
                best_crit = c->crit;
            }
        }
    memcpy(c->order, best, sizeof best);
    c->cost = best_cost;
    c->tie = best_tie;
    c->crit = best_crit;
}

/* Orders the groups (the cheapest path over pipeline links) and totals the
 * cost; keeps the order it had if that costs less (the path heuristic
 * above PATH_EXACT_MAX groups, or shoal's full cost, can disagree). */
static void cand_finish(const struct sched_ctx *cx, struct cand *c, int had_order)
{
    int P = cx->P, old_order[P];
    double old_cost = c->cost, old_tie = c->tie;
    int old_crit = c->crit;
    memcpy(old_order, c->order, sizeof old_order);
    path_open_best(c->edge, P, c->order, cx->pw);
    cand_total(cx, c);
    if (cx->tied_bytes > 0)
        cycle_best(cx, c);
    if (had_order && old_cost < c->cost) {
        memcpy(c->order, old_order, sizeof old_order);
        c->cost = old_cost;
        c->tie = old_tie;
        c->crit = old_crit;
    }
}

/* A lower bound of the shortest open path through the groups: the weight
 * of their minimum spanning tree (Prim, O(P^2)). */
static double path_lower_bound(const double *edge, int P)
{
    if (P < 2)
        return 0;
    double dist[P], sum = 0;
    char in[P];
    memset(in, 0, sizeof in);
    for (int g = 0; g < P; g++)
        dist[g] = edge[g];
    in[0] = 1;
    for (int k = 1; k < P; k++) {
        int next = -1;
        for (int g = 0; g < P; g++)
            if (!in[g] && (next < 0 || dist[g] < dist[next]))
                next = g;
        in[next] = 1;
        sum += dist[next];
        for (int g = 0; g < P; g++)
            if (!in[g] && edge[next * P + g] < dist[g])
                dist[g] = edge[next * P + g];
    }
    return sum;
}

void cand_eval_full(const struct sched_ctx *cx, struct cand *c)
{
    for (int g = 0; g < cx->P; g++)
        group_eval(cx, c, g);
    for (int g = 0; g < cx->P; g++)
        for (int h = g + 1; h < cx->P; h++)
            edge_eval(cx, c, g, h);
    cand_finish(cx, c, 0);
}

/* dtfm: a lower bound of the pipeline link between groups g and h, from
 * the costs alone (every node needs a partner): the largest row or column
 * minimum, without the matching. */
static double edge_lower(const struct sched_ctx *cx, const struct cand *c, int g, int h)
{
    double soft;
    gather_link(cx, c, g, h, cx->wbuf);
    return link_minima(cx->wbuf, cx->D, cx->wbuf + cx->D * cx->D, &soft);
}

int cand_eval_groups(const struct sched_ctx *cx, struct cand *c, int a, int b, double bound)
{
    int P = cx->P;
    int moved[2] = { a, b };
    for (int k = 0; k < 2; k++)
        if (moved[k] < P)
            group_eval(cx, c, moved[k]);
    /* dtfm with a bound, up to PATH_EXACT_MAX groups (above, the tree is
     * too loose to pay for itself): the new DP term plus twice the
     * spanning tree of the links (the moved groups' ones by their lower
     * bounds) already above it rejects the move before any matching. */
    if (cx->pb->cost == SCHED_COST_DTFM && bound < DBL_MAX && P <= PATH_EXACT_MAX) {
        double worst = 0;
        for (int g = 0; g < P; g++)
            if (c->group_dp[g] > worst) worst = c->group_dp[g];
        if (worst > bound + 1e-12)
            return 0;
        double *e = cx->ebuf;
        memcpy(e, c->edge, sizeof(double) * (size_t)P * (size_t)P);
        for (int k = 0; k < 2; k++) {
            int g = moved[k];
            if (g >= P)
                continue;
            for (int h = 0; h < P; h++)
                if (h != g)
                    e[g * P + h] = e[h * P + g] = edge_lower(cx, c, g, h);
        }
        if (worst + 2.0 * path_lower_bound(e, P) > bound + 1e-12)
            return 0;
    }
    for (int k = 0; k < 2; k++) {
        int g = moved[k];
        if (g >= P || (k == 1 && b == a))
            continue;
        for (int h = 0; h < P; h++)
            if (h != g && !(k == 1 && h == a))
                edge_eval(cx, c, g, h);
    }
    /* First the cost in the order the candidate had (a real plan's cost).
     * A move that is no better there is rejected without a new order
     * when it cannot beat `bound`: under dtfm when its DP term plus twice
     * the path's lower bound is above it, or (above PATH_EXACT_MAX groups)
     * when the old order improved by 2-opt and Or-opt is no better either;
     * under shoal always (the order is searched again on every full
     * evaluation and on the final plan). */
    cand_total(cx, c);
    if (c->cost >= bound - 1e-12) {
        if (cx->pb->cost == SCHED_COST_SHOAL)
            return 1;
        double worst = 0;
        for (int g = 0; g < P; g++)
            if (c->group_dp[g] > worst) worst = c->group_dp[g];
        if (worst + 2.0 * path_lower_bound(c->edge, P) > bound + 1e-12)
            return 1;
        if (P > PATH_EXACT_MAX) {   /* the bound is weak here: improve the old order only */
            path_improve_order(c->edge, P, c->order, cx->pw);
            cand_total(cx, c);
            if (c->cost >= bound - 1e-12)
                return 1;
        }
    }
    cand_finish(cx, c, 1);
    return 1;
}

/* Even split for dtfm: the first L % P stages get one layer more. */
static void even_layers(int L, int P, int *layers)
{
    for (int s = 0; s < P; s++)
        layers[s] = L / P + (s < L % P);
}

void cost_plan(const struct sched_ctx *cx, struct sched_plan *plan, int layers_given)
{
    const struct sched_problem *pb = cx->pb;
    int P = cx->P, D = cx->D, n = cx->n;
    int layers[P];
    struct sched_breakdown *bd = &plan->cost;
    memset(bd, 0, sizeof *bd);
    for (int s = 0; s < P; s++)
        layers[s] = plan->layer_end[s] - plan->layer_start[s];
    if (pb->cost == SCHED_COST_DTFM) {
        double dp = 0, pipe = 0;
        for (int s = 0; s < P; s++) {
            double g = group_dp_dtfm(cx, plan->node + s * D);
            if (g > dp) dp = g;
            if (s + 1 < P) {
                double worst = 0;
                for (int r = 0; r < D; r++) {
                    double e = cx->pp[plan->node[s * D + r] * n + plan->node[(s + 1) * D + r]];
                    if (e > worst) worst = e;
                }
                pipe += worst;
            }
        }
        bd->dp_s = dp;
        bd->pipeline_s = pipe;
        bd->total_s = dp + 2.0 * pipe;
        bd->feasible = 1;
        if (!layers_given)
            even_layers((int)(pb->model.layers > 0 ? pb->model.layers : P), P, layers);
    } else {
        double ring_bw[P], ring_lat[P];
        for (int s = 0; s < P; s++)
            group_ring(cx, plan->node + s * D, &ring_bw[s], &ring_lat[s]);
        shoal_cost(cx, plan->node, ring_bw, ring_lat, layers, layers_given, bd, NULL);
    }
    int start = 0;
    for (int s = 0; s < P; s++) {
        plan->layer_start[s] = start;
        start += layers[s];
        plan->layer_end[s] = start;
    }
}

void cand_to_plan(const struct sched_ctx *cx, const struct cand *c, struct sched_plan *plan)
{
    cand_nodes(cx, c, plan->node);
    cost_plan(cx, plan, 0);
}

void sched_memory_report(const struct sched_problem *pb, const struct sched_plan *plan, char *out, size_t len)
{
    struct sched_ctx cx;
    int P = pb->stages, D = pb->replicas, worst = -1, worst_node = -1;
    double worst_over = 0, worst_state = 0, worst_act = 0, worst_mem = 0, worst_stash = 0;
    out[0] = '\0';
    if (pb->cost != SCHED_COST_SHOAL || plan->cost.feasible || ctx_init(&cx, pb) != 0)
        return;
    for (int s = 0; s < P; s++) {
        int layers = plan->layer_end[s] - plan->layer_start[s], at = -1;
        double mem = DBL_MAX;
        for (int r = 0; r < D; r++)
            if (pb->nodes[plan->node[s * D + r]].mem_bytes < mem) {
                at = plan->node[s * D + r];
                mem = pb->nodes[at].mem_bytes;
            }
        double stash = pb->model.schedule == SCHED_GPIPE ? (double)pb->model.micro_batches
                       : (double)(pb->model.micro_batches < P - s ? pb->model.micro_batches : P - s);
        double state = (layers * cx.layer_params + (s == 0 ? cx.first_params : 0) + (s == P - 1 ? cx.last_params : 0))
                       * (double)MODEL_STATE_BYTES_PER_PARAM;
        double act = layers * stash * cx.layer_act_bytes + (s == P - 1 ? cx.last_act_bytes : 0);
        if (worst < 0 || state + act - mem > worst_over) {
            worst = s, worst_node = at, worst_over = state + act - mem;
            worst_state = state, worst_act = act, worst_mem = mem, worst_stash = stash;
        }
    }
    ctx_free(&cx);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    snprintf(out, len, "stage %d (layers " LAYER_RANGE_FMT ") needs %.2f GiB (%.2f of weights, gradients and AdamW state, %.2f of "
             "activations for %.0f micro-batches in flight) and its smallest node (id %lld) has %.2f GiB", worst,
             LAYER_RANGE(plan->layer_start[worst], plan->layer_end[worst]), (worst_state + worst_act) / gib, worst_state / gib,
             worst_act / gib, worst_stash, (long long)pb->nodes[worst_node].id, worst_mem / gib);
}
