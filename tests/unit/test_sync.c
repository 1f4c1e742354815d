/* test_sync.c - agent/train/sync.h, DiLoCo's outer step: D replicas (threads)
 * of a one-stage model train inner steps on their own batches and meet in
 * sync_weights over a real TCP ring; the outer step equals a reference
 * computed here in double (average pseudo-gradient, Nesterov momentum, over
 * two phases so the momentum counts), every replica ends bit-identical, and
 * D replicas fed identical data end where one replica does. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/train/tasklet.h"
#include "../../common/log.h"
#include "../peer_keys.h"

#define D_MAX 4
#define TIMEOUT_MS 10000
#define H 2        /* inner steps */
#define PHASES 2
#define B 2
#define T 8

static const struct model_config model = { .vocab = 16, .context = T, .d_model = 16, .heads = 2, .layers = 2 };

struct replica {
    struct tasklet k;
    struct assignment as;
    struct train_env env;
    struct peer_listener *l;
    float *local[PHASES];   /* the weights before each outer step */
    float *outer_after[PHASES];
    int identical_data;
    int rc;
    struct shoal_err err;
};

static atomic_int no_abort;

/* Tokens of replica r at step t (or replica 0's when identical). */
static void batch(int r, uint64_t t, int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < B * T; i++) {
        uint64_t h = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (t * 131 + (uint64_t)i) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        tok[i] = (int32_t)(h % 16);
        tgt[i] = (int32_t)((h >> 8) % 16);
    }
}

static void *replica_main(void *arg)
{
    struct replica *x = arg;
    struct tasklet *k = &x->k;
    struct kern_err ke;
    int32_t tok[B * T], tgt[B * T];
    size_t n = kern_stage_param_count(k->st);
    x->rc = sync_open(k, &x->err);
    for (uint64_t t = 0; x->rc == 0 && t < (uint64_t)x->as.steps; t++) {
        float loss, dloss = sync_loss_scale(&x->as);
        batch(x->identical_data ? 0 : x->as.replica, t, tok, tgt);
        struct kern_adamw h = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                .grad_scale = 1.0f };
        if (kern_stage_zero_grad(k->st, &ke) || kern_stage_forward(k->st, 0, tok, tgt, &loss, &ke) ||
            kern_stage_backward(k->st, 0, &dloss, NULL, &ke) || kern_stage_adamw(k->st, &h, &ke)) {
            x->rc = -1;
            snprintf(x->err.message, sizeof x->err.message, "%s", ke.msg);
            break;
        }
        int phase = (int)(t / H);
        if (sync_shared_after(&x->as, (int64_t)t)) {
            x->local[phase] = malloc(n * sizeof(float));
            kern_stage_read(k->st, KERN_PARAMS, x->local[phase], &ke);
        }
        x->rc = sync_weights(k, t, &x->err);
        if (x->rc == 0 && sync_shared_after(&x->as, (int64_t)t)) {
            x->outer_after[phase] = malloc(n * sizeof(float));
            kern_stage_read(k->st, KERN_PARAMS, x->outer_after[phase], &ke);
        }
    }
    return NULL;
}

/* D replicas of the one-stage model, ring-connected, trained for PHASES
 * phases of H steps with DiLoCo (outer lr, momentum, sync dtype). */
static void run(struct replica *x, int D, double lr, double mu, enum codec_id codec, int identical)
{
    struct shoal_err err;
    unsigned port[D_MAX];
    pthread_t th[D_MAX];
    memset(x, 0, sizeof *x * (size_t)D);
    for (int r = 0; r < D; r++) {
        struct replica *p = &x[r];
        p->identical_data = identical;
        p->env = (struct train_env){ .peer_timeout_ms = TIMEOUT_MS, .abort = &no_abort };
        p->as = (struct assignment){ .job_id = 5, .epoch = 1, .stage = 0, .replica = r, .stages = 1, .replicas = D,
                                     .layer_start = 0, .layer_end = model.layers, .model = model, .micro_batches = 1,
                                     .micro_batch_size = B, .steps = H * PHASES, .sync = ASSIGN_SYNC_DILOCO,
                                     .inner_steps = H, .outer_lr = lr, .outer_momentum = mu, .sync_codec = codec,
                                     .stage_link = CODEC_F32, .allreduce = ASSIGN_ALLREDUCE_RING };
        p->k = (struct tasklet){ .env = &p->env, .as = &p->as, .ring_prev = { .fd = -1 }, .ring_next = { .fd = -1 } };
        struct kern_device cpu = { KERN_CPU, 0 };
        struct kern_stage_spec sp = { .layer_start = 0, .layer_end = model.layers, .first = 1, .last = 1,
                                      .micro_batch = B, .seq_len = T, .in_flight = 1, .seed = 3 };
        struct kern_err ke;
        assert_int_equal(kern_stage_new(&cpu, &model, &sp, &p->k.st, &ke), 0);
        if (D > 1) {
            struct peer_auth a = { .job_id = 5, .epoch = 1 };
            char prev[PEER_ROLE_MAX];
            wire_role(0, r, 100 + r, a.role);
            wire_role(0, (r + D - 1) % D, 100 + (r + D - 1) % D, prev);
            peer_keys_link(&a, "sync", prev);
            assert_int_equal(peer_listener_start("127.0.0.1:0", &p->l, &port[r], &err), 0);
            peer_listener_expect(p->l, &a);
        }
    }
    for (int r = 0; r < D && D > 1; r++) {
        int to = (r + 1) % D;
        char addr[32], want[PEER_ROLE_MAX];
        struct peer_auth a = { .job_id = 5, .epoch = 1 };
        wire_role(0, r, 100 + r, a.role);
        wire_role(0, to, 100 + to, want);
        peer_keys_link(&a, "sync", want);
        snprintf(addr, sizeof addr, "127.0.0.1:%u", port[to]);
        if (peer_dial(addr, &a, want, TIMEOUT_MS, &x[r].k.ring_next, &err) != 0 ||
            peer_listener_take(x[to].l, a.role, TIMEOUT_MS, &x[to].k.ring_prev, &err) != 0)
            fail_msg("ring: %s", err.message);
    }
    for (int r = 0; r < D; r++)
        pthread_create(&th[r], NULL, replica_main, &x[r]);
    for (int r = 0; r < D; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < D; r++)
        if (x[r].rc != 0)
            fail_msg("replica %d of %d: %s", r, D, x[r].err.message);
}

static void done(struct replica *x, int D)
{
    for (int r = 0; r < D; r++) {
        sync_close(&x[r].k);
        peer_close(&x[r].k.ring_prev);
        peer_close(&x[r].k.ring_next);
        peer_listener_stop(x[r].l);
        kern_stage_free(x[r].k.st);
        for (int p = 0; p < PHASES; p++) {
            free(x[r].local[p]);
            free(x[r].outer_after[p]);
        }
    }
}

/* The outer step against one computed here in double, replicas alike. */
static void test_outer_step_reference(void **state)
{
    (void)state;
    enum { D = 3 };
    struct replica x[D];
    const double lr = 0.7, mu = 0.9;
    run(x, D, lr, mu, CODEC_F32, 0);
    size_t n = kern_stage_param_count(x[0].k.st);
    /* the start: every replica built from the same seed */
    struct kern_stage *fresh;
    struct kern_err ke;
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .layer_start = 0, .layer_end = model.layers, .first = 1, .last = 1,
                                  .micro_batch = B, .seq_len = T, .in_flight = 1, .seed = 3 };
    assert_int_equal(kern_stage_new(&cpu, &model, &sp, &fresh, &ke), 0);
    float *start = malloc(n * sizeof *start);
    kern_stage_read(fresh, KERN_PARAMS, start, &ke);
    double *outer = malloc(n * sizeof *outer), *u = calloc(n, sizeof *u);
    for (size_t i = 0; i < n; i++)
        outer[i] = start[i];
    double worst = 0;
    for (int p = 0; p < PHASES; p++) {
        for (int r = 1; r < D; r++)
            assert_memory_equal(x[r].outer_after[p], x[0].outer_after[p], n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            double delta = 0;
            for (int r = 0; r < D; r++)
                delta += (outer[i] - x[r].local[p][i]) / D;
            u[i] = mu * u[i] + delta;
            outer[i] -= lr * (delta + mu * u[i]);
            double d = fabs(outer[i] - x[0].outer_after[p][i]);
            worst = d > worst ? d : worst;
        }
        /* the replicas really went apart, so the average matters */
        assert_true(memcmp(x[0].local[p], x[1].local[p], n * sizeof(float)) != 0);
    }
    print_message("outer step vs reference: worst difference %.3g\n", worst);
    assert_true(worst < 1e-5);
    /* the momentum travels with the stage (checkpoints carry it) */
    const float *um = kern_stage_extra_if(x[0].k.st, KERN_EXTRA_OUTER_MOMENTUM);
    assert_non_null(um);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(um[i] - u[i]) < 1e-5);
    free(start), free(outer), free(u);
    kern_stage_free(fresh);
    done(x, D);
}

/* D replicas fed identical data end where one replica does: exactly for
 * two (a sum of two equal floats halves exactly), to fp32 rounding for
 * four; with int8 pseudo-gradients too, within int8's error. */
static void test_identical_data_equals_one(void **state)
{
    (void)state;
    struct replica one[1], two[2], four[4], q[2];
    run(one, 1, 0.7, 0.9, CODEC_F32, 1);
    run(two, 2, 0.7, 0.9, CODEC_F32, 1);
    run(four, 4, 0.7, 0.9, CODEC_F32, 1);
    run(q, 2, 0.7, 0.9, CODEC_INT8, 1);
    size_t n = kern_stage_param_count(one[0].k.st);
    double worst4 = 0, worst_q = 0;
    for (int p = 0; p < PHASES; p++) {
        assert_memory_equal(two[0].outer_after[p], one[0].outer_after[p], n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            worst4 = fmax(worst4, fabs(four[0].outer_after[p][i] - one[0].outer_after[p][i]));
            worst_q = fmax(worst_q, fabs(q[1].outer_after[p][i] - one[0].outer_after[p][i]));
        }
    }
    print_message("identical data: 4 replicas within %.3g of one, int8 within %.3g\n", worst4, worst_q);
    assert_true(worst4 < 1e-6);
    assert_true(worst_q < 1e-3 && worst_q > 0);
    done(one, 1), done(two, 2), done(four, 4), done(q, 2);
}

/* One replica, outer lr 1, no momentum: the outer step is the identity on
 * the inner weights, to fp32 rounding. */
static void test_one_replica_lr1_is_plain(void **state)
{
    (void)state;
    struct replica one[1];
    run(one, 1, 1.0, 0.0, CODEC_F32, 0);
    size_t n = kern_stage_param_count(one[0].k.st);
    double worst = 0;
    for (int p = 0; p < PHASES; p++)
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs(one[0].outer_after[p][i] - one[0].local[p][i]));
    assert_true(worst < 1e-6);
    done(one, 1);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outer_step_reference),
        cmocka_unit_test(test_identical_data_equals_one),
        cmocka_unit_test(test_one_replica_lr1_is_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
