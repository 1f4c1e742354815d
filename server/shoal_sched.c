/* shoal_sched.c - shoal-sched: the scheduler offline, for what-if studies.
 *
 *   shoal-sched --scenario world --paper-job --cost dtfm
 *   shoal-sched --nodes nodes.json --links links.json --job job.json
 *
 * Prints the plan as a stage x replica grid, its cost breakdown, and the
 * baselines (best of N random plans, the sequential plan); --json prints one
 * JSON object instead. */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/jobspec.h"
#include "sched/input.h"
#include "sched/scenario.h"
#include "sched/sched.h"

#define BASE_RANDOM 1
#define BASE_SEQUENTIAL 2

struct cli {
    const char *scenario, *nodes_file, *links_file, *job_file;
    int paper_job;
    enum sched_cost cost;
    struct sched_options opt;
    long random_plans;
    int baseline;          /* which baselines to show: BASE_RANDOM | BASE_SEQUENTIAL */
    int json;
    int generated_n, generated_regions;
    char family[16];                               /* --family's name, with generated_n its size */
    uint64_t network_seed;                         /* --generated's links */
    int budget_given;
    double fill_latency_ms, fill_bandwidth_gbps;   /* < 0: missing links are an error */
    int stages, replicas;                          /* with --scenario: override 8 x 8 */
};

static void usage(FILE *out)
{
    fprintf(out,
        "usage: shoal-sched [network] [job] [options]\n\n"
        "network (one of):\n"
        "  --scenario dc|spot|multi|regional|world   the paper's 64-GPU networks\n"
        "  --generated N:R        N nodes in R regions (5 ms/10 Gbit/s inside, 20-200 ms/0.2-2 Gbit/s across)\n"
        "  --family plane|regions|mixed:N   N generated nodes: scattered on a plane, in many small\n"
        "                         regions, or data-centre + university + home GPUs\n"
        "  --nodes FILE --links FILE   GET /v1/nodes and GET /v1/links output of a server\n"
        "job (one of):\n"
        "  --paper-job            GPT-3 XL as in the paper: 24 layers, 8 stages x 8 replicas,\n"
        "                         c_dp 0.65 GB, c_pp 0.47124922 GB (the default)\n"
        "  --job FILE             a job: POST /v1/jobs body or GET /v1/jobs/{id} output\n"
        "options:\n"
        "  --cost dtfm|shoal      cost model [shoal]\n"
        "  --seed N               search seed [1]\n"
        "  --network-seed N       --generated's and --family's network [1]\n"
        "  --budget-ms MS         search time limit [1000; none when --candidates is given alone]\n"
        "  --candidates N         search evaluation limit; same seed, threads and N, same plan [none]\n"
        "  --threads N            islands searched in parallel, one thread each [2]\n"
        "  --starts all|random    all: structured starts and the best baseline too; random: random\n"
        "                         starts only, to measure the search itself [all]\n"
        "  --baseline random|sequential|both   baselines to compare with [both]\n"
        "  --random-plans N       the random baseline: best of N random plans [5000]\n"
        "  --stages P --replicas D   the job's shape, on any network [the job's; with --generated\n"
        "                         or --family and neither given, P = D = floor(sqrt(N))]\n"
        "  --fill-latency-ms MS --fill-bandwidth-gbps G   use these for unmeasured links\n"
        "  --json                 one JSON object on stdout\n");
}

/* Parses a long from `s` into `out`; -1 on junk or out of [lo, hi]. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_args(struct cli *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->cost = SCHED_COST_SHOAL;
    c->opt.seed = 1;
    c->opt.budget_ms = 1000;
    c->network_seed = 1;
    c->random_plans = 5000;
    c->baseline = BASE_RANDOM | BASE_SEQUENTIAL;
    c->fill_latency_ms = c->fill_bandwidth_gbps = -1;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        long l;
        int takes = 1;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(f, "--paper-job") == 0) {
            c->paper_job = 1;
            takes = 0;
        } else if (strcmp(f, "--json") == 0) {
            c->json = 1;
            takes = 0;
        } else if (!v) {
            fprintf(stderr, "shoal-sched: %s needs a value (see --help)\n", f);
            return -1;
        } else if (strcmp(f, "--scenario") == 0) {
            c->scenario = v;
        } else if (strcmp(f, "--nodes") == 0) {
            c->nodes_file = v;
        } else if (strcmp(f, "--links") == 0) {
            c->links_file = v;
        } else if (strcmp(f, "--job") == 0) {
            c->job_file = v;
        } else if ((strcmp(f, "--generated") == 0 || strcmp(f, "--family") == 0) && c->generated_n) {
            fprintf(stderr, "shoal-sched: give one of --generated and --family, once\n");
            return -1;
        } else if (strcmp(f, "--generated") == 0) {
            long n, r;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *colon = strchr(buf, ':');
            if (!colon) goto bad;
            *colon = '\0';
            if (parse_long(buf, 2, 100000, &n) || parse_long(colon + 1, 1, 1000, &r)) goto bad;
            c->generated_n = (int)n;
            c->generated_regions = (int)r;
        } else if (strcmp(f, "--family") == 0) {
            long n;
            const char *colon = strchr(v, ':');
            if (!colon || colon == v || (size_t)(colon - v) >= sizeof c->family ||
                parse_long(colon + 1, 2, 100000, &n)) goto bad;
            snprintf(c->family, sizeof c->family, "%.*s", (int)(colon - v), v);
            c->generated_n = (int)n;
            c->generated_regions = 0;
        } else if (strcmp(f, "--cost") == 0) {
            if (strcmp(v, "dtfm") == 0) c->cost = SCHED_COST_DTFM;
            else if (strcmp(v, "shoal") == 0) c->cost = SCHED_COST_SHOAL;
            else goto bad;
        } else if (strcmp(f, "--baseline") == 0) {
            if (strcmp(v, "random") == 0) c->baseline = BASE_RANDOM;
            else if (strcmp(v, "sequential") == 0) c->baseline = BASE_SEQUENTIAL;
            else if (strcmp(v, "both") == 0) c->baseline = BASE_RANDOM | BASE_SEQUENTIAL;
            else goto bad;
        } else if (strcmp(f, "--network-seed") == 0) {
            if (parse_long(v, 0, 0x7fffffffffffffffL, &l)) goto bad;
            c->network_seed = (uint64_t)l;
        } else if (strcmp(f, "--seed") == 0) {
            if (parse_long(v, 0, 0x7fffffffffffffffL, &l)) goto bad;
            c->opt.seed = (uint64_t)l;
        } else if (strcmp(f, "--budget-ms") == 0) {
            if (parse_double(v, 0, 3.6e6, &c->opt.budget_ms)) goto bad;
            c->budget_given = 1;
        } else if (strcmp(f, "--candidates") == 0) {
            if (parse_long(v, 0, 1000000000L, &c->opt.candidates)) goto bad;
        } else if (strcmp(f, "--threads") == 0) {
            if (parse_long(v, 1, SCHED_THREADS_MAX, &l)) goto bad;
            c->opt.threads = (int)l;
        } else if (strcmp(f, "--starts") == 0) {
            if (strcmp(v, "all") == 0) c->opt.random_starts_only = 0;
            else if (strcmp(v, "random") == 0) c->opt.random_starts_only = 1;
            else goto bad;
        } else if (strcmp(f, "--random-plans") == 0) {
            if (parse_long(v, 0, 100000000L, &c->random_plans)) goto bad;
        } else if (strcmp(f, "--stages") == 0) {
            if (parse_long(v, 1, 4096, &l)) goto bad;
            c->stages = (int)l;
        } else if (strcmp(f, "--replicas") == 0) {
            if (parse_long(v, 1, 4096, &l)) goto bad;
            c->replicas = (int)l;
        } else if (strcmp(f, "--fill-latency-ms") == 0) {
            if (parse_double(v, 0, 1e6, &c->fill_latency_ms)) goto bad;
        } else if (strcmp(f, "--fill-bandwidth-gbps") == 0) {
            if (parse_double(v, 1e-9, 1e6, &c->fill_bandwidth_gbps)) goto bad;
        } else {
            fprintf(stderr, "shoal-sched: unknown option '%s' (see --help)\n", f);
            return -1;
        }
        a += takes;
        continue;
bad:
        fprintf(stderr, "shoal-sched: bad value '%s' for %s (see --help)\n", v, f);
        return -1;
    }
    /* A candidate budget alone makes the search repeatable: no time limit. */
    if (c->opt.candidates > 0 && !c->budget_given)
        c->opt.budget_ms = 0;
    return 0;
}

/* A one-line progress bar on stderr when it is a terminal. */
static void progress_bar(double fraction, double best, void *arg)
{
    (void)arg;
    int width = 30, done = (int)(fraction * width);
    fprintf(stderr, "\r  searching [%.*s%*s] %3.0f%%  best %.4f s ", done,
            "##############################", width - done, "", fraction * 100, best);
    fflush(stderr);
}

static void print_grid(const struct sched_problem *pb, const struct sched_plan *plan)
{
    printf("plan (rows: stages with their layers; columns: replicas; cells: node id @ region)\n");
    printf("%-18s", "stage (layers)");
    for (int r = 0; r < plan->replicas; r++)
        printf(" replica %-8d", r);
    printf("\n");
    for (int s = 0; s < plan->stages; s++) {
        char head[48];   /* "%d (%lld-%lld)" at their widest */
        snprintf(head, sizeof head, "%d (" LAYER_RANGE_FMT ")", s, LAYER_RANGE(plan->layer_start[s], plan->layer_end[s]));
        printf("%-18s", head);
        for (int r = 0; r < plan->replicas; r++) {
            const struct sched_node *nd = &pb->nodes[plan->node[s * plan->replicas + r]];
            char cell[48];
            snprintf(cell, sizeof cell, "%lld@%s", (long long)nd->id, nd->region);
            printf(" %-16.16s", cell);
        }
        printf("\n");
    }
}

/* Reads a whole JSON file; NULL with `err` set if it cannot. */
static json_t *load_json_file(const char *path, struct shoal_err *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        err_set(err, 2, "bad_file", path, "cannot read %s: %s (line %d)", path, je.text, je.line);
    return j;
}

static int load_network(const struct cli *c, struct scenario *net, struct shoal_err *err)
{
    int given = !!c->scenario + !!c->generated_n + !!(c->nodes_file || c->links_file);
    if (given != 1)
        return err_set(err, 2, "usage", NULL,
                       "give one network: --scenario, --generated, --family, or --nodes and --links");
    if (c->scenario)
        return scenario_paper(c->scenario, net, err);
    if (c->generated_n && c->family[0])
        return scenario_family(c->family, c->generated_n, c->network_seed, net, err);
    if (c->generated_n)
        return scenario_generated(c->generated_n, c->generated_regions, c->network_seed, net, err);
    if (!c->nodes_file || !c->links_file)
        return err_set(err, 2, "usage", NULL, "--nodes and --links go together");
    int rc = -1;
    json_t *nodes = load_json_file(c->nodes_file, err), *links = nodes ? load_json_file(c->links_file, err) : NULL;
    if (nodes && links)
        rc = input_network(nodes, links, c->fill_latency_ms, c->fill_bandwidth_gbps, net, err);
    json_decref(nodes);
    json_decref(links);
    return rc;
}

/* The job: the paper's GPT-3 XL set-up, or a job file (a POST /v1/jobs
 * body, or GET /v1/jobs/{id} output with the spec under "spec"). */
static int load_job(const struct cli *c, const struct scenario *net, struct sched_problem *pb,
                    struct shoal_err *err)
{
    memset(pb, 0, sizeof *pb);
    pb->n = net->n;
    pb->nodes = net->nodes;
    pb->latency_ms = net->latency_ms;
    pb->bandwidth_gbps = net->bandwidth_gbps;
    pb->cost = c->cost;
    if (c->job_file && c->paper_job)
        return err_set(err, 2, "usage", NULL, "give --job or --paper-job, not both");
    if (c->job_file) {
        struct job_spec spec;
        json_t *doc = load_json_file(c->job_file, err);
        if (!doc)
            return -1;
        int rc = jobspec_from_document(doc, &spec, err);
        json_decref(doc);
        if (rc != 0)
            return -1;
        jobspec_sched_model(&spec, pb);
    } else {
        sched_paper_job(pb);
    }
    if (c->stages)
        pb->stages = c->stages;
    if (c->replicas)
        pb->replicas = c->replicas;
    if (c->generated_n && !c->stages && !c->replicas) {
        int side = 1;
        while ((side + 1) * (side + 1) <= net->n)
            side++;
        pb->stages = pb->replicas = side;
    }
    if (pb->model.layers < pb->stages) {
        fprintf(stderr, "shoal-sched: note: %d stages need %d layers; the model's %lld are raised to %d\n",
                pb->stages, pb->stages, (long long)pb->model.layers, pb->stages);
        pb->model.layers = pb->stages;
    }
    /* A job file's dtfm sizes follow its shape; the paper's are fixed. */
    if (c->job_file)
        sched_dtfm_sizes(pb);
    return 0;
}

static json_t *breakdown_json(const struct sched_breakdown *b)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "total_s", b->total_s, "dp_s", b->dp_s,
                     "pipeline_s", b->pipeline_s, "compute_s", b->compute_s, "comm_s", b->comm_s,
                     "bubble_s", b->bubble_s, "optimizer_s", b->optimizer_s, "feasible", b->feasible);
}

int main(int argc, char **argv)
{
    struct cli c;
    struct shoal_err err;
    struct scenario net;
    struct sched_problem problem;
    struct sched_plan plan;
    int rc = 1;

    memset(&net, 0, sizeof net);
    memset(&plan, 0, sizeof plan);
    if (parse_args(&c, argc, argv) != 0)
        return 2;
    if (load_network(&c, &net, &err) != 0 || load_job(&c, &net, &problem, &err) != 0)
        goto fail;
    const struct sched_problem *pb = &problem;
    if (sched_plan_init(&plan, pb->stages, pb->replicas)) {
        err_set(&err, 1, "oom", NULL, "out of memory");
        goto fail;
    }
    if (!c.json && isatty(2)) {
        c.opt.progress = progress_bar;
    }
    c.opt.random_plans = c.baseline & BASE_RANDOM ? c.random_plans : 0;
    if (sched_search(pb, &c.opt, &plan, &err) != 0)
        goto fail;
    if (c.opt.progress)
        fprintf(stderr, "\r%60s\r", "");

    struct sched_bytes bytes;
    if (sched_bytes_per_step(pb, &plan, &bytes, &err) != 0)
        goto fail;

    /* Baselines, computed by the search: the best of N random plans, and the sequential plan. */
    double best_random = plan.baselines.best_random_s, sequential = plan.baselines.sequential_s;

    const char *cost_name = pb->cost == SCHED_COST_DTFM ? "dtfm" : "shoal";
    if (c.json) {
        json_t *grid = json_array();
        for (int s = 0; s < plan.stages; s++) {
            json_t *row = json_array();
            for (int r = 0; r < plan.replicas; r++)
                json_array_append_new(row, json_integer(pb->nodes[plan.node[s * plan.replicas + r]].id));
            json_array_append_new(grid, json_pack("{s:i, s:i, s:o}", "layer_start", plan.layer_start[s],
                                                  "layer_end", plan.layer_end[s], "nodes", row));
        }
        /* A baseline that was not asked for is null. */
        json_t *baselines = json_pack("{s:o, s:I, s:o}",
            "best_random_s", c.baseline & BASE_RANDOM ? json_real(best_random) : json_null(),
            "random_plans", (json_int_t)(c.baseline & BASE_RANDOM ? c.random_plans : 0),
            "sequential_s", c.baseline & BASE_SEQUENTIAL ? json_real(sequential) : json_null());
        json_t *out = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:{s:I, s:f, s:f, s:i, s:s, s:f}, s:o}",
                                "cost_model", cost_name, "nodes", pb->n, "stages", pb->stages,
                                "replicas", pb->replicas, "plan", grid, "cost", breakdown_json(&plan.cost),
                                "search", "evaluations", (json_int_t)plan.evaluations, "best_at_ms",
                                plan.best_at_ms, "budget_ms", c.opt.budget_ms, "threads",
                                c.opt.threads > 0 ? c.opt.threads : SCHED_THREADS_DEFAULT, "starts",
                                c.opt.random_starts_only ? "random" : "all", "start_cost", plan.start_cost,
                                "baselines", baselines);
        if (pb->cost == SCHED_COST_SHOAL)
            json_object_set_new(out, "bytes_per_step", json_pack("{s:I, s:I, s:I}",
                "stage_links", (json_int_t)bytes.stage_links, "sync", (json_int_t)bytes.sync,
                "tied_head", (json_int_t)bytes.tied_head));
        json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(out);
    } else {
        print_grid(pb, &plan);
        const struct sched_breakdown *b = &plan.cost;
        printf("\ncost model %s: %.4f s per iteration%s\n", cost_name, b->total_s,
               pb->cost == SCHED_COST_DTFM ? " (model-seconds)" : "");
        if (pb->cost == SCHED_COST_DTFM)
            printf("  data-parallel %.4f s + 2 x pipeline %.4f s\n", b->dp_s, b->pipeline_s);
        else
            printf("  pipeline %.4f s (compute %.4f, comm %.4f, bubble %.4f) + all-reduce %.4f s + optimizer %.4f s\n",
                   b->pipeline_s, b->compute_s, b->comm_s, b->bubble_s, b->dp_s, b->optimizer_s);
        if (pb->cost == SCHED_COST_SHOAL) {
            const double MiB = 1024.0 * 1024.0;
            printf("  sent per step: stage links %.1f MiB, sync %.1f MiB, tied head %.1f MiB\n",
                   bytes.stage_links / MiB, bytes.sync / MiB, bytes.tied_head / MiB);
            if (bytes.tied_head > 0)
                printf("  (the tied head's embedding gradient goes between each replica's first and last stage "
                       "every step: place them together or untie; docs/slow-links.md)\n");
        }
        printf("search: %ld evaluations, best found after %.0f ms (best start %.4f s)\n", plan.evaluations,
               plan.best_at_ms, plan.start_cost);
        if (c.baseline & BASE_RANDOM)
            printf("baseline: best of %ld random plans %.4f s (%.2fx the plan's cost)\n", c.random_plans,
                   best_random, best_random / b->total_s);
        if (c.baseline & BASE_SEQUENTIAL)
            printf("baseline: sequential plan %.4f s (%.2fx the plan's cost)\n", sequential, sequential / b->total_s);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "shoal-sched: %s\n", err.message);
out:
    sched_plan_free(&plan);
    scenario_free(&net);
    return rc;
}
