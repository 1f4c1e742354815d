/* tasklet.c - test_nccl_host's scenario of the agent's own use of an NCCL
 * group: three tasklets of the last stage, each a struct tasklet with a
 * stage on its emulated device, as train.c builds them.  sync_open joins
 * the group, live_share hands the root's stage to the others (a live
 * resume), and sync_gradients passes the losses and sums the gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host/cuda_runtime.h" /* the emulation: this test never runs on a device */
#include "../gpu_check.h"
#include "../../../agent/train/live.h"
#include "../../../agent/train/tasklet.h"
#include "ranks.h"

#define ROOT 1          /* the replica that holds the resume step */
#define M 2             /* micro-batches a step */

/* One replica's tasklet and what it saw. */
struct member {
    struct train_env env;
    struct assignment as;
    struct tasklet k;
    double loss[M];
    int open_rc, share_rc, sync_rc;
    struct shoal_err err;               /* the first call that failed */
    uint64_t step;                      /* AdamW steps its stage holds after live_share */
    float *state[3];                    /* host copies after live_share: weights, both moments */
    float *grads;                       /* host copy after sync_gradients */
    size_t n;                           /* floats in each */
};

static struct member members[RANKS];

static const enum kern_buffer state_parts[3] = { KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V };

/* The loss of micro-batch m on replica r: distinct in the low bits. */
static double member_loss(int r, int m)
{
    return 2.0 + r / 3.0 + m / 7.0;
}

/* The tasklet of rank r: the last stage of a one-stage-per-scenario job,
 * resuming live at step 1 from replica ROOT, on r's device. */
static int member_init(struct member *x, struct rank *r, struct kern_err *ke)
{
    struct model_config model = { .vocab = 16, .context = 8, .d_model = 16, .heads = 2, .layers = 1 };
    struct kern_stage_spec sp = { .layer_start = 0, .layer_end = 1, .first = 1, .last = 1, .micro_batch = 2,
                                  .seq_len = 8, .in_flight = 1, .seed = 11 };
    model_config_normalise(&model);
    x->env = (struct train_env){ .ctl = &r->ctl, .dev = { KERN_CUDA, r->device }, .peer_timeout_ms = 10000,
                                 .connect_timeout_ms = (int)(OPEN_S * 1000), .abort = &r->abort };
    x->as = (struct assignment){ .job_id = job_id, .epoch = epoch, .stage = r->stage, .stages = r->stage + 1,
                                 .replica = r->rank, .replicas = r->size, .layer_start = 0, .layer_end = 1,
                                 .model = model, .micro_batches = M, .micro_batch_size = 2, .steps = 4,
                                 .sync = ASSIGN_SYNC_EVERY_STEP, .allreduce = ASSIGN_ALLREDUCE_NCCL, .live = 1,
                                 .live_root = ROOT, .resume_step = 1 };
    x->k = (struct tasklet){ .env = &x->env, .as = &x->as, .ring_prev = { .fd = -1 }, .ring_next = { .fd = -1 },
                             .tie_prev = { .fd = -1 }, .tie_next = { .fd = -1 }, .loss = x->loss };
    return kern_stage_new(&x->env.dev, &model, &sp, &x->k.st, ke);
}

/* The root's stage takes one AdamW step from gradients of its own, so
 * that its weights, moments and step differ from a fresh stage's. */
static int root_steps(struct member *x, struct kern_err *ke)
{
    size_t n = kern_stage_param_count(x->k.st);
    float *g = malloc(n * sizeof *g);
    struct kern_adamw h = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .grad_scale = 1.0f };
    for (size_t i = 0; g && i < n; i++)
        g[i] = rank_value(0, ROOT, i);
    int rc = !g || kern_stage_write(x->k.st, KERN_GRADS, g, ke) || kern_stage_adamw(x->k.st, &h, ke) ? -1 : 0;
    free(g);
    return rc;
}

/* Host copies of the stage's `which` buffer into *out (malloc'd). */
static int member_read(struct member *x, enum kern_buffer which, float **out, struct kern_err *ke)
{
    if (!(*out = malloc(x->n * sizeof **out)))
        return -1;
    return kern_stage_read(x->k.st, which, *out, ke);
}

/* Each replica writes gradients and losses of its own, then sync_gradients. */
static int member_sync(struct member *x, int rank, struct kern_err *ke)
{
    float *g = malloc(x->n * sizeof *g);
    for (size_t i = 0; g && i < x->n; i++)
        g[i] = rank_value(1, rank, i);
    for (int m = 0; m < M; m++)
        x->loss[m] = member_loss(rank, m);
    x->k.ring_prev_loss = NAN;
    int rc = !g || kern_stage_write(x->k.st, KERN_GRADS, g, ke) ? -1 : sync_gradients(&x->k, 1, &x->err);
    free(g);
    return rc;
}

static void *tasklet_rank(void *arg)
{
    struct rank *r = arg;
    struct member *x = &members[r->rank];
    struct kern_err ke = { { 0 } };
    x->open_rc = x->share_rc = x->sync_rc = -2;
    if (member_init(x, r, &ke) != 0 || (r->rank == ROOT && root_steps(x, &ke) != 0)) {
        err_set(&x->err, 500, "device_error", NULL, "%s", ke.msg);
        goto out;
    }
    x->n = kern_stage_param_count(x->k.st);
    if ((x->open_rc = sync_open(&x->k, &x->err)) != 0 || (x->share_rc = live_share(&x->k, &x->err)) != 0)
        goto out;
    x->step = kern_stage_step(x->k.st);
    for (int p = 0; p < 3; p++)
        if (member_read(x, state_parts[p], &x->state[p], &ke) != 0)
            goto out;
    if ((x->sync_rc = member_sync(x, r->rank, &ke)) == 0)
        x->sync_rc = member_read(x, KERN_GRADS, &x->grads, &ke);
out:
    sync_close(&x->k);
    kern_stage_free(x->k.st);
    return NULL;
}

/* 1 when floats a[0..n) and b[0..n) hold the same bits. */
static int same_floats(const float *a, const float *b, size_t n)
{
    return a && b && memcmp(a, b, n * sizeof *a) == 0;
}

void scenario_tasklet(void)
{
    struct rank r[RANKS];
    memset(members, 0, sizeof members);
    run_ranks(tasklet_rank, STAGE_TASKLET, RANKS, (const int[]){ 0, 1, 2 }, r);
    const struct member *root = &members[ROOT];
    for (int k = 0; k < RANKS; k++) {
        const struct member *x = &members[k];
        char what[160];
        int same = 1;
        for (int p = 0; p < 3; p++)
            same &= same_floats(x->state[p], root->state[p], x->n);
        snprintf(what, sizeof what, "tasklet: replica %d %s the root's stage in live_share (step 1, weights and "
                 "moments bit for bit)", k, k == ROOT ? "keeps" : "loads");
        check("nccl", what, x->open_rc == 0 && x->share_rc == 0 && x->step == 1 && same,
              "sync_open %s, live_share %s; step %llu; %s", outcome(x->open_rc, &x->err),
              outcome(x->share_rc, &x->err), (unsigned long long)x->step, same ? "alike" : "the state differs");
    }
    for (int k = 0; k < RANKS; k++) {
        const struct member *x = &members[k];
        int prev = (k - 1 + RANKS) % RANKS;
        double want = (member_loss(prev, 0) + member_loss(prev, 1)) / M;
        char what[160];
        snprintf(what, sizeof what, "tasklet: replica %d's sync_gradients on the last stage leaves replica %d's "
                 "loss in ring_prev_loss, bit for bit", k, prev);
        check("nccl", what, x->sync_rc == 0 && memcmp(&x->k.ring_prev_loss, &want, sizeof want) == 0,
              "%s; %.17g, want %.17g", outcome(x->sync_rc, &x->err), x->k.ring_prev_loss, want);
    }
    size_t wrong = 0, n = members[0].n;
    for (int k = 0; k < RANKS; k++)
        for (size_t i = 0; i < n; i++) {
            float want = rank_value(1, 0, i) + rank_value(1, 1, i);
            want += rank_value(1, 2, i); /* in rank order, as the emulation sums */
            wrong += !members[k].grads || memcmp(&members[k].grads[i], &want, sizeof want) != 0;
        }
    check("nccl", "tasklet: then every replica holds the sum of the replicas' gradients", n > 0 && wrong == 0,
          "%zu of %zu floats wrong over the replicas", wrong, 3 * n);
    for (int k = 0; k < RANKS; k++) {
        for (int p = 0; p < 3; p++)
            free(members[k].state[p]);
        free(members[k].grads);
    }
}
