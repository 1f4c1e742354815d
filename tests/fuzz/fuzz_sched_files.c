/* fuzz_sched_files.c - the files shoal-sched reads (server/shoal_sched.c):
 * the nodes and links documents (input_network) and the job file
 * (jobspec_from_document), then the problem checks and, on what passes,
 * the cost models: the sequential plan, a few random ones, the same plan
 * costed again with its layers as given, and a short search.
 *
 * Input: byte 0 holds options (bit 0: the dtfm cost model, else shoal;
 * bit 1: fill unmeasured links with 80 ms / 0.2 Gbit/s; bit 2: search too),
 * then the nodes document, a NUL byte, the links document, and optionally a
 * NUL byte and the job file (without it, the paper's job, --paper-job).
 * Networks over FUZZ_MAX_NODES nodes are parsed but not costed, so that one
 * input stays well under 100 ms. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/jobs/jobspec.h"
#include "../../server/sched/input.h"
#include "../../server/sched/sched.h"

#define FUZZ_MAX_NODES 48
#define FUZZ_MAX_SEARCH_STAGES 6
#define FUZZ_SEARCH_CANDIDATES 12

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_sched_files: broken promise: %s\n", what);
        abort();
    }
}

/* The next part of [*p, end), up to a NUL byte or the end; *len its
 * bytes, *more 1 when a NUL ended it (another part follows). */
static const char *next_part(const uint8_t **p, const uint8_t *end, size_t *len, int *more)
{
    const uint8_t *start = *p, *nul = memchr(start, 0, (size_t)(end - start));
    *len = (size_t)((nul ? nul : end) - start);
    *p = nul ? nul + 1 : end;
    *more = nul != NULL;
    return (const char *)start;
}

/* Parses a document as load_json_file does (JSON_REJECT_DUPLICATES). */
static json_t *load_part(const char *text, size_t len)
{
    json_error_t je;
    return json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
}

static void check_network(const struct scenario *net)
{
    int n = net->n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            expect(i == j ? net->latency_ms[i * n + j] == 0 : net->bandwidth_gbps[i * n + j] > 0,
                   "every link of the network is measured or filled");
}

/* The sequential plan, random plans, the plan costed again with its
 * layers, and a short search: costs are numbers, never NaN. */
static void cost_problem(const struct sched_problem *pb, int search)
{
    struct sched_plan plan;
    struct sched_baselines bl;
    struct shoal_err e;
    if (sched_plan_init(&plan, pb->stages, pb->replicas) != 0)
        return;
    expect(sched_baselines(pb, 1, 4, &bl, &e) == 0, "baselines of a checked problem");
    expect(!isnan(bl.sequential_s) && !isnan(bl.best_random_s), "baseline costs are numbers");
    expect(sched_baseline_sequential(pb, &plan, &e) == 0, "the sequential plan of a checked problem");
    expect(!isnan(plan.cost.total_s), "the sequential plan's cost is a number");
    double first = plan.cost.total_s;
    expect(sched_predict(pb, &plan, &e) == 0, "a plan's own layer split is a valid one");
    expect(plan.cost.total_s == first || (pb->cost == SCHED_COST_SHOAL && !plan.cost.feasible),
           "the same plan costs the same with its layers given");
    if (search && pb->stages <= FUZZ_MAX_SEARCH_STAGES) {
        struct sched_options opt = { .seed = 1, .candidates = FUZZ_SEARCH_CANDIDATES };
        if (sched_search(pb, &opt, &plan, &e) == 0)
            expect(!isnan(plan.cost.total_s), "the search's plan costs a number");
    }
    sched_plan_free(&plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct scenario net;
    struct sched_problem pb;
    struct job_spec spec;
    struct shoal_err e;
    size_t len;
    int more, has_job;
    if (size < 1)
        return 0;
    int options = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    const char *text = next_part(&p, end, &len, &more);
    json_t *nodes = load_part(text, len);
    text = next_part(&p, end, &len, &has_job);
    json_t *links = load_part(text, len);
    text = next_part(&p, end, &len, &more);
    json_t *job = has_job ? load_part(text, len) : NULL;
    memset(&net, 0, sizeof net);
    if (!nodes || !links || (has_job && !job))
        goto out;
    double fill_lat = options & 2 ? 80 : INPUT_NO_FILL, fill_bw = options & 2 ? 0.2 : INPUT_NO_FILL;
    if (input_network(nodes, links, fill_lat, fill_bw, &net, &e) != 0)
        goto out;
    check_network(&net);
    memset(&pb, 0, sizeof pb);
    if (job) {
        if (jobspec_from_document(job, &spec, &e) != 0)
            goto out;
        jobspec_sched_model(&spec, &pb);
    } else {
        sched_paper_job(&pb);
    }
    pb.n = net.n;
    pb.nodes = net.nodes;
    pb.latency_ms = net.latency_ms;
    pb.bandwidth_gbps = net.bandwidth_gbps;
    pb.cost = options & 1 ? SCHED_COST_DTFM : SCHED_COST_SHOAL;
    if (net.n <= FUZZ_MAX_NODES && sched_problem_check(&pb, &e) == 0)
        cost_problem(&pb, options & 4);
out:
    scenario_free(&net);
    json_decref(nodes);
    json_decref(links);
    json_decref(job);
    return 0;
}
