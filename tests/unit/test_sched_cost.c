/* test_sched_cost.c - server/sched/cost.c: the dtfm and shoal cost models
 * against values worked out by hand (the arithmetic is in the comments),
 * the paper's dc scenario, and sched_predict (a plan costed with its layer
 * ranges as given) against sched_evaluate.  The search's cached candidate
 * costs are test_sched_cand.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/sched/internal.h"
#include "../../server/sched/scenario.h"
#include "../../server/sched/sched.h"

#include "sched_fixture.h"
#include "sched_random_net.h"

/* ---- dtfm, 4 nodes, P = 2, D = 2 --------------------------------------- */

/* Asymmetric on purpose: the DP term reads each direction, the pipeline
 * edge the mean of both.  Latency ms, bandwidth Gbit/s. */
static const double lat4[16] = {
     0, 10, 40, 20,
    30,  0, 20, 60,
    40, 20,  0, 10,
    20, 40, 30,  0,
};
static const double bw4[16] = {
    1, 8, 2, 4,
    4, 1, 8, 1,
    2, 8, 1, 8,
    4, 2, 4, 1,
};

static struct sched_node nodes4[4] = {
    { .id = 10, .tflops = 100, .mem_bytes = 1e12 },
    { .id = 11, .tflops = 100, .mem_bytes = 1e12 },
    { .id = 12, .tflops = 100, .mem_bytes = 1e12 },
    { .id = 13, .tflops = 100, .mem_bytes = 1e12 },
};

static struct sched_problem dtfm4(void)
{
    return (struct sched_problem){ .n = 4, .nodes = nodes4, .latency_ms = lat4, .bandwidth_gbps = bw4,
                                   .stages = 2, .replicas = 2, .cost = SCHED_COST_DTFM,
                                   .c_dp_gb = 2.0, .c_pp_gb = 0.5 };
}

/* By hand.  c_dp = 2 GB, D = 2: DP term dp(i,j) = 2*(lat/1000 + 2*8/(bw*2))
 * = 2*(lat/1000 + 8/bw).  With D = 2 a group {a,b} costs
 * max(dp(a,b), dp(b,a)):
 *   {0,1}: dp01 = 2*(0.01+1)    = 2.02, dp10 = 2*(0.03+2) = 4.06 -> 4.06
 *   {2,3}: dp23 = 2*(0.01+1)    = 2.02, dp32 = 2*(0.03+2) = 4.06 -> 4.06
 *   {0,2}: dp02 = dp20 = 2*(0.04+4) = 8.08                        -> 8.08
 *   {1,3}: dp13 = 2*(0.06+8)   = 16.12, dp31 = 2*(0.04+4) = 8.08 -> 16.12
 *   {0,3}: dp03 = dp30 = 2*(0.02+2) = 4.04                        -> 4.04
 *   {1,2}: dp12 = dp21 = 2*(0.02+1) = 2.04                        -> 2.04
 * c_pp = 0.5 GB: one way e(i,j) = lat/1000 + 0.5*8/bw = lat/1000 + 4/bw;
 * pipeline edge pp(i,j) = (e(i,j) + e(j,i)) / 2:
 *   pp01 = (0.51 + 1.03)/2 = 0.77    pp02 = (2.04 + 2.04)/2 = 2.04
 *   pp03 = (1.02 + 1.02)/2 = 1.02    pp12 = (0.52 + 0.52)/2 = 0.52
 *   pp13 = (4.06 + 2.04)/2 = 3.05    pp23 = (0.51 + 1.03)/2 = 0.77
 * Partitions (P = 2: the pipeline is the one bottleneck edge):
 *   {0,1}|{2,3}: DP 4.06, edge min(max(pp02,pp13)=3.05, max(pp03,pp12)=1.02) = 1.02
 *                total 4.06 + 2*1.02 = 6.10
 *   {0,2}|{1,3}: DP 16.12, edge min(max(pp01,pp23)=0.77, max(pp03,pp21)=1.02) = 0.77
 *                total 16.12 + 2*0.77 = 17.66
 *   {0,3}|{1,2}: DP 4.04, edge min(max(pp01,pp32)=0.77, max(pp02,pp31)=3.05) = 0.77
 *                total 4.04 + 2*0.77 = 5.58   <- optimum */
static void test_cost_dtfm_fixed_plans_by_hand(void **state)
{
    (void)state;
    struct sched_problem pb = dtfm4();
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 2), 0);
    static const struct {
        int node[4];          /* [stage*2 + replica] */
        double dp, pipe, total;
    } cases[] = {
        /* stage 0 = {0,1}, stage 1 = {2,3}, replicas 0->2, 1->3: max(pp02, pp13) = 3.05 */
        { { 0, 1, 2, 3 }, 4.06, 3.05, 4.06 + 2 * 3.05 },
        /* same groups, matched pairing 0->3, 1->2: max(1.02, 0.52) = 1.02 */
        { { 0, 1, 3, 2 }, 4.06, 1.02, 4.06 + 2 * 1.02 },
        /* {0,3} then {1,2}, 0->1, 3->2: max(0.77, 0.77) */
        { { 0, 3, 1, 2 }, 4.04, 0.77, 4.04 + 2 * 0.77 },
        /* {0,3} then {2,1}: 0->2, 3->1: max(2.04, 3.05) */
        { { 0, 3, 2, 1 }, 4.04, 3.05, 4.04 + 2 * 3.05 },
        /* {1,3} then {0,2}: 1->0 0.77, 3->2 0.77; DP 16.12 */
        { { 1, 3, 0, 2 }, 16.12, 0.77, 16.12 + 2 * 0.77 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(plan.node, cases[k].node, sizeof cases[k].node);
        assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
        assert_near(plan.cost.dp_s, cases[k].dp, 1e-12);
        assert_near(plan.cost.pipeline_s, cases[k].pipe, 1e-12);
        assert_near(plan.cost.total_s, cases[k].total, 1e-12);
        assert_int_equal(plan.cost.feasible, 1);
    }
    sched_plan_free(&plan);
}

static void test_cost_dtfm_search_finds_hand_optimum(void **state)
{
    (void)state;
    struct sched_problem pb = dtfm4();
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 2), 0);
    struct sched_options opt = { .seed = 3, .candidates = 2000 };
    assert_int_equal(sched_search(&pb, &opt, &plan, &err), 0);
    assert_near(plan.cost.total_s, 5.58, 1e-12);
    assert_near(plan.cost.dp_s, 4.04, 1e-12);
    assert_near(plan.cost.pipeline_s, 0.77, 1e-12);
    /* Groups {0,3} and {1,2}, 0 paired with 1 and 3 with 2. */
    int s03 = plan.node[0] == 0 || plan.node[0] == 3 ? 0 : 1;
    for (int r = 0; r < 2; r++) {
        int a = plan.node[s03 * 2 + r], b = plan.node[(1 - s03) * 2 + r];
        assert_true((a == 0 && b == 1) || (a == 3 && b == 2));
    }
    sched_plan_free(&plan);
}

/* Three stages: the fixed plan's pipeline is the sum over consecutive
 * stages of the worst replica.  P = 3, D = 1 on nodes 0..2 (dp is 0:
 * one node per group).  Order 0,1,2: pp01 + pp12 = 0.77 + 0.52 = 1.29,
 * total 2*1.29 = 2.58; order 1,0,2: pp10 + pp02 = 0.77 + 2.04 = 2.81. */
static void test_cost_dtfm_three_stage_sum(void **state)
{
    (void)state;
    struct sched_problem pb = dtfm4();
    pb.stages = 3;
    pb.replicas = 1;
    pb.c_dp_gb = 2.0;   /* irrelevant with D = 1, kept to show it */
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 3, 1), 0);
    plan.node[0] = 0; plan.node[1] = 1; plan.node[2] = 2;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_near(plan.cost.dp_s, 0, 1e-12);
    assert_near(plan.cost.pipeline_s, 1.29, 1e-12);
    assert_near(plan.cost.total_s, 2.58, 1e-12);
    plan.node[0] = 1; plan.node[1] = 0; plan.node[2] = 2;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_near(plan.cost.total_s, 2 * 2.81, 1e-12);
    /* dtfm splits layers evenly (3 stages, no layers given: one each). */
    assert_int_equal(plan.layer_start[0], 0);
    assert_int_equal(plan.layer_end[2], 3);
    sched_plan_free(&plan);
}

/* ---- the paper's dc scenario ---------------------------------------------- */

/* 8 instances of 8 GPUs: 100 Gbit/s inside, 3.125 Gbit/s across, 0 ms.
 * The strided plan puts group g = {g, g+8, ..., g+56} (one GPU of each
 * instance) at stage g, replica r on instance r:
 *   DP: every pair crosses instances: 7 * 2*(0 + 0.65*8/(3.125*8)) = 7 * 0.416 = 2.912
 *   pipeline: stage s -> s+1 of replica r stays in instance r:
 *             7 * 0.47124922*8/100 = 7 * 0.0376999376 = 0.2638995632
 *   total 2.912 + 2*0.2638995632 = 3.4397991264 (3.440 in the paper). */
static void dc_problem(struct scenario *sc, struct sched_problem *pb)
{
    struct shoal_err err;
    assert_int_equal(scenario_paper("dc", sc, &err), 0);
    memset(pb, 0, sizeof *pb);
    pb->n = sc->n;
    pb->nodes = sc->nodes;
    pb->latency_ms = sc->latency_ms;
    pb->bandwidth_gbps = sc->bandwidth_gbps;
    pb->cost = SCHED_COST_DTFM;
    sched_paper_job(pb);
}

static void test_cost_dtfm_paper_dc_strided(void **state)
{
    (void)state;
    struct scenario sc;
    struct sched_problem pb;
    dc_problem(&sc, &pb);
    assert_int_equal(pb.stages, 8);
    assert_int_equal(pb.replicas, 8);
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 8, 8), 0);
    for (int s = 0; s < 8; s++)
        for (int r = 0; r < 8; r++)
            plan.node[s * 8 + r] = s + 8 * r;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_near(plan.cost.dp_s, 2.912, 1e-12);
    assert_near(plan.cost.pipeline_s, 0.2638995632, 1e-12);
    assert_near(plan.cost.total_s, 3.4397991264, 1e-12);
    assert_near(plan.cost.total_s, 3.4398, 1e-5);
    /* 24 layers on 8 stages: 3 each. */
    for (int s = 0; s < 8; s++) {
        assert_int_equal(plan.layer_start[s], 3 * s);
        assert_int_equal(plan.layer_end[s], 3 * s + 3);
    }
    /* The sequential baseline puts each instance in one group: DP is cheap
     * (7 * 2*0.65*8/(100*8) = 0.091), every pipeline edge crosses instances
     * (0.47124922*8/3.125 = 1.2063980032, 7 of them): 0.091 + 2*8.4447860224. */
    assert_int_equal(sched_baseline_sequential(&pb, &plan, &err), 0);
    assert_near(plan.cost.total_s, 0.091 + 2 * 7 * 1.2063980032, 1e-12);
    sched_plan_free(&plan);
    scenario_free(&sc);
}

static void test_cost_dtfm_paper_dc_search(void **state)
{
    (void)state;
    struct scenario sc;
    struct sched_problem pb;
    dc_problem(&sc, &pb);
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 8, 8), 0);
    struct sched_options opt = { .seed = 1, .budget_ms = 1000 };
    assert_int_equal(sched_search(&pb, &opt, &plan, &err), 0);
    if (!(plan.cost.total_s <= 3.4399))
        fail_msg("dc search reached %.6f, want <= 3.4399", plan.cost.total_s);
    /* What the search reports is what the plan costs when evaluated. */
    struct sched_breakdown found = plan.cost;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_near(plan.cost.total_s, found.total_s, 1e-12);
    sched_plan_free(&plan);
    scenario_free(&sc);
}

/* sched_dtfm_sizes: c_dp = layers*(12C^2+13C)/P * 4 bytes, c_pp = M*B*T*C*2
 * bytes, both over 2^30.  C = 64, 4 layers, P = 2, M = 4, B = 2, T = 32:
 *   c_dp = 4*49984/2*4 = 399872 B;  c_pp = 4*2*32*64*2 = 32768 B. */
static void test_cost_dtfm_sizes(void **state)
{
    (void)state;
    struct sched_problem pb = { .stages = 2 };
    pb.model = (struct sched_model){ .vocab_size = 128, .context_length = 32, .d_model = 64, .heads = 4,
                                     .layers = 4, .micro_batches = 4, .micro_batch_size = 2, .act_bytes = 2 };
    sched_dtfm_sizes(&pb);
    assert_near(pb.c_dp_gb, 399872.0 / 1073741824.0, 1e-12);
    assert_near(pb.c_pp_gb, 32768.0 / 1073741824.0, 1e-12);
}

/* ---- shoal ---------------------------------------------------------------- */

/* Tiny GPT: V = 128, T = 32, C = 64, 4 heads, M = 4 micro-batches of B = 2.
 *   tokens      = B*T = 64
 *   layer_flops = 64*(72*64^2 + 6*64*32) = 64*(294912 + 12288) = 19660800
 *   last_flops  = 64*6*64*128 = 3145728
 *   layer_params = 12*64^2 + 13*64 = 49984
 *   first_params = V*C + T*C = 8192 + 2048 = 10240
 *   last_params  = 2*C + V*C = 128 + 8192 = 8320
 *   boundary     = 64*64*2 bytes = 8192 B = 65536 bit */
static struct sched_model tiny_model(int64_t layers)
{
    return (struct sched_model){ .vocab_size = 128, .context_length = 32, .d_model = 64, .heads = 4,
                                 .layers = layers, .micro_batches = 4, .micro_batch_size = 2,
                                 .schedule = SCHED_GPIPE, .act_bytes = 2 };
}

/* Two nodes at 1 and 2 GFLOP/s (0.001, 0.002 TFLOP/s, so compute dominates),
 * 0->1: 1 ms, 10 Gbit/s; 1->0: 2 ms, 20 Gbit/s.  P = 2, D = 1, 3 layers. */
static const double lat2[4] = { 0, 1, 2, 0 };
static const double bw2[4] = { 1, 10, 20, 1 };
static struct sched_node nodes2[2] = {
    { .id = 1, .tflops = 0.001, .mem_bytes = 1e15 },
    { .id = 2, .tflops = 0.002, .mem_bytes = 1e15 },
};

static struct sched_problem shoal2(void)
{
    return (struct sched_problem){ .n = 2, .nodes = nodes2, .latency_ms = lat2, .bandwidth_gbps = bw2,
                                   .stages = 2, .replicas = 1, .cost = SCHED_COST_SHOAL,
                                   .model = tiny_model(3) };
}

/* Plan [0, 1] (stage 0 on the slow node):
 *   layers: each stage 1, the third goes where the stage's time is lower:
 *     stage 0: 2*19660800/0.001 = 3.93e10;  stage 1: (2*19660800 + 3145728)/0.002 = 2.12e10
 *     -> stage 1: layers [0,1) and [1,3)
 *   t0 = 19660800/1e9 = 0.0196608 s;  t1 = (39321600 + 3145728)/2e9 = 0.021233664 s
 *   link, both ways: (0.001 + 65536/10e9) + (0.002 + 65536/20e9)
 *                  = 0.0010065536 + 0.0020032768 = 0.0030098304 s
 *   pipeline = t0 + link + t1 + (M-1)*max(t0, t1, link)
 *            = 0.0439042944 + 3*0.021233664 = 0.1076052864 s
 *   compute  = M*max(t0,t1) = 0.084934656;  bubble = 0.0226706304
 *   optimizer = max(params*12/(tflops*1e12*0.05)):
 *     stage 0: (49984 + 10240)*12/(1e9*0.05) = 722688/5e7  = 0.01445376
 *     stage 1: (2*49984 + 8320)*12/(2e9*0.05) = 1299456/1e8 = 0.01299456
 *   total = 0.1076052864 + 0.01445376 = 0.1220590464 s
 * Plan [1, 0]: layers [2, 1]; t0 = 39321600/2e9 = 0.0196608,
 *   t1 = (19660800 + 3145728)/1e9 = 0.022806528; pipeline = 0.0454771584
 *   + 3*0.022806528 = 0.1138967424; optimizer max(110208*12/1e8 = 0.01322496,
 *   58304*12/5e7 = 0.01399296) = 0.01399296; total 0.1278897024 s. */
static void test_cost_shoal_pipeline_by_hand(void **state)
{
    (void)state;
    struct sched_problem pb = shoal2();
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 1), 0);

    plan.node[0] = 0;
    plan.node[1] = 1;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_int_equal(plan.layer_start[0], 0);
    assert_int_equal(plan.layer_end[0], 1);
    assert_int_equal(plan.layer_start[1], 1);
    assert_int_equal(plan.layer_end[1], 3);
    assert_near(plan.cost.pipeline_s, 0.1076052864, 1e-12);
    assert_near(plan.cost.compute_s, 0.084934656, 1e-12);
    assert_near(plan.cost.comm_s, 0.0030098304, 1e-12);
    assert_near(plan.cost.bubble_s, 0.0226706304, 1e-12);
    assert_near(plan.cost.optimizer_s, 0.01445376, 1e-12);
    assert_near(plan.cost.dp_s, 0, 1e-12);
    assert_near(plan.cost.total_s, 0.1220590464, 1e-12);
    assert_int_equal(plan.cost.feasible, 1);

    plan.node[0] = 1;
    plan.node[1] = 0;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_int_equal(plan.layer_end[0], 2);
    assert_int_equal(plan.layer_end[1], 3);
    assert_near(plan.cost.pipeline_s, 0.1138967424, 1e-12);
    assert_near(plan.cost.optimizer_s, 0.01399296, 1e-12);
    assert_near(plan.cost.total_s, 0.1278897024, 1e-12);

    /* The search picks the cheaper of the two. */
    struct sched_options opt = { .seed = 5, .candidates = 500 };
    assert_int_equal(sched_search(&pb, &opt, &plan, &err), 0);
    assert_int_equal(plan.node[0], 0);
    assert_int_equal(plan.node[1], 1);
    assert_near(plan.cost.total_s, 0.1220590464, 1e-12);
    sched_plan_free(&plan);
}

/* Evaluates the two-stage plan on nodes 0 and 1 for pb into *plan
 * (sched_plan_free it); returns sched_evaluate's answer. */
static int evaluate_two_stages(const struct sched_problem *pb, struct sched_plan *plan)
{
    struct shoal_err err;
    assert_int_equal(sched_plan_init(plan, 2, 1), 0);
    plan->node[0] = 0;
    plan->node[1] = 1;
    return sched_evaluate(pb, plan, &err);
}

/* The same plan for a Llama model of the same sizes, one kv head of 16
 * channels and an MLP of 96 (common/model.c's row, by hand):
 *   block: ln1w 64, q 4096, k 1024, v 1024, o 4096, ln2w 64, gate, up and
 *          down 6144 each = 28800 parameters, 28672 of them in products
 *   layer_flops = 64 tokens * (6*28672 + 6*64*32) = 11796480
 *   head: lnfw 64 + head 8192 = 8256; last_flops = 64 * 6*8192 = 3145728;
 *   embedding: wte 8192 (no positions)
 *   layers [0,1) + [1,3) as before; t0 = 0.01179648,
 *   t1 = (2*11796480 + 3145728)/2e9 = 0.013369344; compute = 4 t1
 *   optimizer: stage 0 (28800 + 8192)*12/5e7 = 0.00887808,
 *              stage 1 (2*28800 + 8256)*12/1e8 = 0.00790272
 * The same plan for Qwen3 of the same sizes with heads of 32 channels
 * (head_dim; d_model / heads is 16), so q is 128 wide (common/model.c's
 * row, by hand):
 *   block: ln1w 64, q 8192, k 2048, v 2048, q_norm 32, k_norm 32, o 8192,
 *          ln2w 64, gate, up and down 6144 each = 39104 parameters, 38912
 *          of them in products
 *   layer_flops = 64 tokens * (6*38912 + 6*128*32) = 16515072 (the
 *          attention's products are q's width, not d_model, wide)
 *   t0 = 0.016515072, t1 = (2*16515072 + 3145728)/2e9 = 0.018087936 (the
 *          split stays [0,1) + [1,3)); compute = 4 t1
 *   optimizer: stage 0 (39104 + 8192)*12/5e7 = 0.01135104
 * and with a sliding window of 16 of the 32 positions: layer_flops = 64 *
 *   (6*38912 + 6*128*16) = 15728640, t1 = (2*15728640 + 3145728)/2e9 =
 *   0.017301504 */
static void test_cost_shoal_families_by_hand(void **state)
{
    (void)state;
    static const struct {
        enum model_arch arch;
        int head_dim, window;
        double t1, optimizer_s;   /* s */
    } cases[] = {
        {MODEL_LLAMA, 0, 0, 0.013369344, 0.00887808},
        {MODEL_QWEN3, 32, 0, 0.018087936, 0.01135104},
        {MODEL_QWEN3, 32, 16, 0.017301504, 0.01135104},
    };
    struct sched_problem pb = shoal2();
    struct sched_plan plan;
    pb.model.kv_heads = 1;
    pb.model.ffn_dim = 96;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb.model.arch = cases[i].arch;
        pb.model.head_dim = cases[i].head_dim;
        pb.model.sliding_window = cases[i].window;
        assert_int_equal(evaluate_two_stages(&pb, &plan), 0);
        assert_int_equal(plan.layer_end[0], 1);
        assert_int_equal(plan.layer_end[1], 3);
        assert_near(plan.cost.compute_s, 4 * cases[i].t1, 1e-12);
        assert_near(plan.cost.optimizer_s, cases[i].optimizer_s, 1e-12);
        sched_plan_free(&plan);
    }
    /* a family's constraint is the problem check's too */
    pb.model.kv_heads = 3;
    assert_int_equal(evaluate_two_stages(&pb, &plan), -1);
    sched_plan_free(&plan);
}

/* P = 1, D = 2 on nodes 0 and 1 (both 0.001 TFLOP/s), 2 layers:
 *   0->1: 5 ms, 4 Gbit/s; 1->0: 3 ms, 2 Gbit/s.  The ring of two uses both
 *   directions: slowest 2 Gbit/s, worst latency 5 ms.
 *   params = 2*49984 + 10240 + 8320 = 118528
 *   all-reduce = 2*(D-1)/D * params*4*8/(2e9) + 2*(D-1)*5/1000
 *              = 3792896/2e9 + 0.01 = 0.011896448 s
 *   compute per micro-batch = (2*19660800 + 3145728)/1e9 = 0.042467328;
 *   pipeline = M*t = 0.169869312 (one stage: no bubble)
 *   optimizer = 118528*12/(1e9*0.05) = 0.02844672
 *   total = 0.169869312 + 0.011896448 + 0.02844672 = 0.21021248 s */
static void test_cost_shoal_allreduce_by_hand(void **state)
{
    (void)state;
    static const double lat[4] = { 0, 5, 3, 0 };
    static const double bw[4] = { 1, 4, 2, 1 };
    struct sched_node nd[2] = {
        { .id = 1, .tflops = 0.001, .mem_bytes = 1e15 },
        { .id = 2, .tflops = 0.001, .mem_bytes = 1e15 },
    };
    struct sched_problem pb = { .n = 2, .nodes = nd, .latency_ms = lat, .bandwidth_gbps = bw,
                                .stages = 1, .replicas = 2, .cost = SCHED_COST_SHOAL, .model = tiny_model(2) };
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 1, 2), 0);
    for (int first = 0; first < 2; first++) {   /* either member first: same ring */
        plan.node[0] = first;
        plan.node[1] = 1 - first;
        assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
        assert_near(plan.cost.dp_s, 0.011896448, 1e-12);
        assert_near(plan.cost.pipeline_s, 0.169869312, 1e-12);
        assert_near(plan.cost.compute_s, 0.169869312, 1e-12);
        assert_near(plan.cost.bubble_s, 0, 1e-12);
        assert_near(plan.cost.optimizer_s, 0.02844672, 1e-12);
        assert_near(plan.cost.total_s, 0.21021248, 1e-12);
        assert_int_equal(plan.layer_start[0], 0);
        assert_int_equal(plan.layer_end[0], 2);
    }
    sched_plan_free(&plan);
}

/* ---- sched_predict: a plan as it stands -------------------------------- */

static void assert_breakdown_equal(const struct sched_breakdown *got, const struct sched_breakdown *want)
{
    static const char *const names[] = { "total_s", "dp_s", "pipeline_s", "compute_s", "comm_s", "bubble_s",
                                         "optimizer_s" };
    const double g[] = { got->total_s, got->dp_s, got->pipeline_s, got->compute_s, got->comm_s, got->bubble_s,
                         got->optimizer_s };
    const double w[] = { want->total_s, want->dp_s, want->pipeline_s, want->compute_s, want->comm_s,
                         want->bubble_s, want->optimizer_s };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (g[k] != w[k])
            fail_msg("%s: got %.17g, want %.17g", names[k], g[k], w[k]);
    assert_int_equal(got->feasible, want->feasible);
}

/* Costing a plan with the layer ranges sched_evaluate chose for it gives
 * sched_evaluate's breakdown, to the bit: a stored plan's prediction is
 * the cost the scheduler ranked it by.  The hand-worked plan [0, 1] of
 * shoal2 (layers [0,1) and [1,3), 0.1220590464 s), then random plans on
 * random networks (1F1B: the stash differs per stage; D = 2: all-reduce). */
static void test_cost_predict_matches_evaluate_shoal(void **state)
{
    (void)state;
    struct sched_problem pb = shoal2();
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 1), 0);
    plan.node[0] = 0;
    plan.node[1] = 1;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    struct sched_breakdown chosen = plan.cost;
    assert_int_equal(sched_predict(&pb, &plan, &err), 0);
    assert_breakdown_equal(&plan.cost, &chosen);
    assert_near(plan.cost.total_s, 0.1220590464, 1e-12);
    assert_int_equal(plan.layer_end[0], 1);   /* the layers are kept */
    assert_int_equal(plan.layer_end[1], 3);
    sched_plan_free(&plan);

    static const struct { int P, D, n; } shapes[] = { { 3, 2, 7 }, { 4, 1, 5 }, { 2, 3, 6 } };
    uint64_t rng = 4242;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int P = shapes[k].P, D = shapes[k].D, n = shapes[k].n;
        struct net w;
        int perm[12];
        assert_int_equal(sched_plan_init(&plan, P, D), 0);
        for (int t = 0; t < 20; t++) {
            random_net(&w, n, &rng, 0);
            pb = net_problem(&w, P, D, SCHED_COST_SHOAL);
            rng_permutation(perm, n, &rng);
            memcpy(plan.node, perm, sizeof(int) * (size_t)(P * D));
            assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
            chosen = plan.cost;
            assert_int_equal(plan.cost.feasible, 1);
            assert_int_equal(sched_predict(&pb, &plan, &err), 0);
            assert_breakdown_equal(&plan.cost, &chosen);
        }
        sched_plan_free(&plan);
    }
}

/* The memory check on a split as given.  The tiny model (GPipe, M = 4):
 *   per layer = layer_params*16 + M*layer_act_bytes
 *             = 49984*16 + 4 * 64*64*(34 + 5*4*32/64) = 799744 + 4*180224 = 1520640 B
 *   stage 0 fixed = first_params*16 = 10240*16 = 163840 B
 * so stage 0 holds 2 layers in 163840 + 2*1520640 = 3205120 B and 1 in a
 * byte less.  On the faster node, sched_evaluate would give stage 0 the
 * second layer; its memory cap keeps it at one.  Forcing [0,2), [2,3) is
 * one layer past the cap: infeasible, total SCHED_INFEASIBLE_S + 1. */
static void test_cost_predict_over_memory_is_infeasible(void **state)
{
    (void)state;
    struct sched_node nd[2] = {
        { .id = 1, .tflops = 0.002, .mem_bytes = 3205120 - 1 },
        { .id = 2, .tflops = 0.001, .mem_bytes = 1e15 },
    };
    struct sched_problem pb = shoal2();
    pb.nodes = nd;
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 1), 0);
    plan.node[0] = 0;
    plan.node[1] = 1;
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    assert_int_equal(plan.cost.feasible, 1);
    assert_int_equal(plan.layer_end[0], 1);

    plan.layer_start[0] = 0; plan.layer_end[0] = 2;
    plan.layer_start[1] = 2; plan.layer_end[1] = 3;
    assert_int_equal(sched_predict(&pb, &plan, &err), 0);
    assert_int_equal(plan.cost.feasible, 0);
    assert_near(plan.cost.total_s, SCHED_INFEASIBLE_S + 1, 1e-12);
    assert_int_equal(plan.layer_end[0], 2);   /* kept as given */

    nd[0].mem_bytes = 3205120;                  /* now the two layers fit */
    assert_int_equal(sched_predict(&pb, &plan, &err), 0);
    assert_int_equal(plan.cost.feasible, 1);
    assert_true(plan.cost.total_s < 1);
    sched_plan_free(&plan);
}

/* Layer ranges must be contiguous, in order, non-empty, and cover the
 * model's 3 layers exactly; anything else is 422 on field "layers".  A
 * node twice is refused as by sched_evaluate. */
static void test_cost_predict_bad_layers(void **state)
{
    (void)state;
    struct sched_problem pb = shoal2();
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 1), 0);
    static const struct {
        const char *what;
        int start[2], end[2];
    } cases[] = {
        { "a gap",                { 0, 2 }, { 1, 3 } },
        { "an overlap",           { 0, 1 }, { 2, 3 } },
        { "not from layer 0",     { 1, 2 }, { 2, 3 } },
        { "an empty last stage",  { 0, 3 }, { 3, 3 } },
        { "an empty first stage", { 0, 0 }, { 0, 3 } },
        { "a reversed range",     { 0, 2 }, { 2, 1 } },
        { "short of the model",   { 0, 1 }, { 1, 2 } },
        { "past the model",       { 0, 2 }, { 2, 4 } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        plan.node[0] = 0;
        plan.node[1] = 1;
        for (int s = 0; s < 2; s++) {
            plan.layer_start[s] = cases[k].start[s];
            plan.layer_end[s] = cases[k].end[s];
        }
        err_clear(&err);
        if (sched_predict(&pb, &plan, &err) != -1)
            fail_msg("%s: accepted", cases[k].what);
        assert_int_equal(err.status, 422);
        assert_string_equal(err.code, "invalid_field");
        assert_string_equal(err.field, "layers");
    }
    plan.node[1] = 0;
    plan.layer_start[0] = 0; plan.layer_end[0] = 1;
    plan.layer_start[1] = 1; plan.layer_end[1] = 3;
    assert_int_equal(sched_predict(&pb, &plan, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.field, "assignments");
    sched_plan_free(&plan);
}

/* dtfm has no layers in it: every split of 6 layers costs what
 * sched_evaluate's even one does (plan {0,1} | {3,2}: 4.06 + 2*1.02). */
static void test_cost_predict_dtfm_ignores_layers(void **state)
{
    (void)state;
    struct sched_problem pb = dtfm4();
    pb.model.layers = 6;
    struct sched_plan plan;
    struct shoal_err err;
    assert_int_equal(sched_plan_init(&plan, 2, 2), 0);
    static const int node[4] = { 0, 1, 3, 2 };
    memcpy(plan.node, node, sizeof node);
    assert_int_equal(sched_evaluate(&pb, &plan, &err), 0);
    struct sched_breakdown even = plan.cost;
    assert_near(even.total_s, 4.06 + 2 * 1.02, 1e-12);
    for (int split = 1; split < 6; split++) {
        plan.layer_start[0] = 0; plan.layer_end[0] = split;
        plan.layer_start[1] = split; plan.layer_end[1] = 6;
        assert_int_equal(sched_predict(&pb, &plan, &err), 0);
        assert_breakdown_equal(&plan.cost, &even);
        assert_int_equal(plan.layer_end[0], split);
    }
    sched_plan_free(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost_dtfm_fixed_plans_by_hand),
        cmocka_unit_test(test_cost_dtfm_search_finds_hand_optimum),
        cmocka_unit_test(test_cost_dtfm_three_stage_sum),
        cmocka_unit_test(test_cost_dtfm_paper_dc_strided),
        cmocka_unit_test(test_cost_dtfm_paper_dc_search),
        cmocka_unit_test(test_cost_dtfm_sizes),
        cmocka_unit_test(test_cost_shoal_pipeline_by_hand),
        cmocka_unit_test(test_cost_shoal_families_by_hand),
        cmocka_unit_test(test_cost_shoal_allreduce_by_hand),
        cmocka_unit_test(test_cost_predict_matches_evaluate_shoal),
        cmocka_unit_test(test_cost_predict_over_memory_is_infeasible),
        cmocka_unit_test(test_cost_predict_bad_layers),
        cmocka_unit_test(test_cost_predict_dtfm_ignores_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
