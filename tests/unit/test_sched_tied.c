/* test_sched_tied.c - the shoal cost model and search for a head tied
 * to the embedding across stages: the two ends of each replica's pipeline
 * sum the tied matrix's gradient every step (agent/train/train.c's tie
 * exchange, a ring of two), priced by hand, moved by the search where it
 * is cheap, and never worse than the baselines. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "../../server/sched/scenario.h"
#include "../../server/sched/sched.h"

#include "sched_fixture.h"

/* A small Llama: V 128, C 64, 4 heads, 1 kv head, ffn 96. */
static struct sched_model small_llama(int64_t layers, int tied)
{
    return (struct sched_model){ .vocab_size = 128, .context_length = 32, .d_model = 64, .heads = 4,
                                 .layers = layers, .arch = MODEL_LLAMA, .kv_heads = 1, .ffn_dim = 96,
                                 .tied = tied, .micro_batches = 4, .micro_batch_size = 2,
                                 .schedule = SCHED_GPIPE, .act_bytes = 2 };
}

/* Two nodes, 0->1: 1 ms, 10 Gbit/s; 1->0: 2 ms, 20 Gbit/s.  The tied
 * matrix is V*C = 8192 floats, 32768 bytes; each end sends half of it
 * twice, both ways at once:
 *   0->1: 0.001 + 16384*8/10e9 = 0.0010131072
 *   1->0: 0.002 + 16384*8/20e9 = 0.0020065536   (the slower)
 *   exchange = 2 * 0.0020065536 = 0.0040131072 s, in dp_s and the total.
 * Untied, or on one stage, nothing crosses. */
static void test_tied_exchange_by_hand(void **state)
{
    (void)state;
    static const double lat[4] = { 0, 1, 2, 0 };
    static const double bw[4] = { 1, 10, 20, 1 };
    static const struct sched_node nodes[2] = {
        { .id = 1, .tflops = 0.001, .mem_bytes = 1e15 },
        { .id = 2, .tflops = 0.002, .mem_bytes = 1e15 },
    };
    struct sched_problem pb = { .n = 2, .nodes = nodes, .latency_ms = lat, .bandwidth_gbps = bw, .stages = 2,
                                .replicas = 1, .cost = SCHED_COST_SHOAL, .model = small_llama(3, 0) };
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 1), 0);
    for (int first = 0; first < 2; first++) {
        plan.node[0] = first;
        plan.node[1] = 1 - first;
        pb.model.tied = 0;
        assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
        struct sched_breakdown untied = plan.cost;
        assert_near(untied.dp_s, 0, 1e-15);
        pb.model.tied = 1;
        assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
        assert_near(plan.cost.dp_s, 0.0040131072, 1e-12);
        assert_near(plan.cost.total_s - untied.total_s, 0.0040131072, 1e-12);
        /* the copy is kept either way: same memory, same pipeline */
        assert_near(plan.cost.pipeline_s, untied.pipeline_s, 1e-15);
    }
    sched_plan_free(&plan);

    /* one stage ties on the node itself: no exchange */
    pb.stages = 1;
    assert_int_equal(sched_plan_init(&plan, 1, 1), 0);
    plan.node[0] = 0;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_near(plan.cost.dp_s, 0, 1e-15);
    sched_plan_free(&plan);
}

/* Two regions of two nodes: inside one 1 ms and 100 Gbit/s, between them
 * 50 ms and 0.1 Gbit/s; four stages, one replica.  An untied pipeline
 * crosses between the regions once, so its ends are apart.  A tied one
 * with a large vocabulary (V 32768: 8 MiB of gradient, 0.67 s between
 * the regions) keeps its ends in one region and crosses twice (4 KiB
 * per micro-batch and direction) instead. */
static void test_tied_ends_meet(void **state)
{
    (void)state;
    double lat[16], bw[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int near = i / 2 == j / 2;
            lat[i * 4 + j] = i == j ? 0 : near ? 1 : 50;
            bw[i * 4 + j] = i == j ? 1 : near ? 100 : 0.1;
        }
    struct sched_node nodes[4];
    for (int i = 0; i < 4; i++)
        nodes[i] = (struct sched_node){ .id = i + 1, .tflops = 1, .mem_bytes = 1e15 };
    struct sched_problem pb = { .n = 4, .nodes = nodes, .latency_ms = lat, .bandwidth_gbps = bw, .stages = 4,
                                .replicas = 1, .cost = SCHED_COST_SHOAL, .model = small_llama(4, 0) };
    pb.model.vocab_size = 32768;
    pb.model.micro_batch_size = 1;
    struct shoal_err err;
    struct sched_plan untied, tied;
    assert_int_equal(sched_plan_init(&untied, 4, 1), 0);
    assert_int_equal(sched_plan_init(&tied, 4, 1), 0);
    struct sched_options opt = { .seed = 1, .candidates = 400, .random_starts_only = 1 };
    assert_int_equal(sched_search(&pb, &opt, &untied, &err), 0);
    assert_true(untied.node[0] / 2 != untied.node[3] / 2);
    pb.model.tied = 1;
    assert_int_equal(sched_search(&pb, &opt, &tied, &err), 0);
    assert_true(tied.node[0] / 2 == tied.node[3] / 2);
    /* the ends' exchange inside a region: 2 * (0.001 + 4 MiB * 8 / 100e9) */
    assert_near(tied.cost.dp_s, 2 * (0.001 + 4194304.0 * 8 / 100e9), 1e-12);
    /* the untied plan, priced with the exchange, is the dearer one */
    assert_int_equal(sched_evaluate(&pb, &untied, &err), 0);
    print_message("tied: its own plan %.4f s, the untied plan %.4f s\n", tied.cost.total_s, untied.cost.total_s);
    assert_true(tied.cost.total_s < untied.cost.total_s);
    sched_plan_free(&untied);
    sched_plan_free(&tied);
}

/* The planner's property for tied jobs: on generated networks, a tied
 * SmolLM2-shaped job's plan never costs more than the sequential plan or
 * the best random plan the same run computed. */
static void test_tied_never_worse_than_its_baselines(void **state)
{
    (void)state;
    static const char *const families[] = { "plane", "regions", "mixed" };
    static const int shapes[][3] = { { 9, 3, 3 }, { 14, 4, 3 } };
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 2; k++) {
            struct scenario sc;
            struct shoal_err err;
            assert_int_equal(scenario_family(families[f], shapes[k][0], 1 + (uint64_t)k, &sc, &err), 0);
            struct sched_problem pb = {
                .n = sc.n, .nodes = sc.nodes, .latency_ms = sc.latency_ms, .bandwidth_gbps = sc.bandwidth_gbps,
                .stages = shapes[k][1], .replicas = shapes[k][2], .cost = SCHED_COST_SHOAL,
                .model = { .vocab_size = 49152, .context_length = 1024, .d_model = 576, .heads = 9,
                           .layers = 30, .arch = MODEL_LLAMA, .kv_heads = 3, .ffn_dim = 1536, .tied = 1,
                           .micro_batches = 8, .micro_batch_size = 4, .schedule = SCHED_1F1B, .act_bytes = 2 } };
            struct sched_plan plan;
            assert_int_equal(sched_plan_init(&plan, pb.stages, pb.replicas), 0);
            struct sched_options opt = { .seed = 7, .candidates = 300, .threads = 2, .random_plans = 300 };
            assert_int_equal(sched_search(&pb, &opt, &plan, &err), 0);
            double got = plan.cost.total_s, eps = 1e-12 * got;
            if (got > plan.baselines.sequential_s + eps || got > plan.baselines.best_random_s + eps)
                fail_msg("%s:%d: plan %.9g, sequential %.9g, best random %.9g", families[f], shapes[k][0], got,
                         plan.baselines.sequential_s, plan.baselines.best_random_s);
            assert_int_equal(sched_predict(&pb, &plan, &err), 0);
            assert_near(plan.cost.total_s, got, 1e-12);
            assert_true(plan.cost.dp_s > 0);
            sched_plan_free(&plan);
            scenario_free(&sc);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tied_exchange_by_hand),
        cmocka_unit_test(test_tied_ends_meet),
        cmocka_unit_test(test_tied_never_worse_than_its_baselines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
