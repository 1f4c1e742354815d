/* sync.c - the sync modes of a stage's data-parallel group (sync.h). */
#include "sync.h"

#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "tasklet.h"

/* What a mode does at each point of a step; NULL: nothing. */
struct sync_mode {
    const char *name;
    int (*open)(struct tasklet *k, struct shoal_err *err);
    int (*gradients)(struct tasklet *k, uint64_t t, struct shoal_err *err);
    int (*weights)(struct tasklet *k, uint64_t t, struct shoal_err *err);
    int replicas_in_loss;   /* 1: the group's sum makes the mean over D replicas */
};

/* every_step: joins the group's NCCL communicator when the plan puts it on
 * NCCL.  Every member must come within the connect timeout. */
static int every_step_open(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    if (as->replicas == 1 || as->allreduce != ASSIGN_ALLREDUCE_NCCL)
        return 0;
    if (k->env->dev.kind != KERN_CUDA)
        return err_set(err, 409, "device_mismatch", NULL, "the plan sums stage %d's gradients with NCCL, but this "
                       "agent trains on the cpu; restart it with --device cuda", as->stage);
    /* The tasklet's abort flag: a re-plan ends the waits for the id and
     * the peers at once, as it ends the ring's (tasklet.h). */
    return nccl_group_open(k->env->ctl, k->env->abort, as->job_id, as->epoch, as->stage, as->replica,
                           as->replicas, k->env->dev.index, k->env->connect_timeout_ms / 1e3, &k->nccl, err);
}

/* every_step under NCCL: the last stage's losses go round first, as on
 * the ring (ring.h), then the n gradients g (on the GPU) are summed in
 * place.  Which peer failed NCCL does not say: the report names none. */
static int nccl_gradients(struct tasklet *k, float *g, size_t n, int on_device, struct shoal_err *err)
{
    double timeout_s = k->env->peer_timeout_ms / 1e3;
    int last = k->as->stage == k->as->stages - 1;
    /* NCCL's own sockets: count what its ring sends (the losses' all-gather:
     * 8 bytes to each other rank) */
    k->dp_bytes += ring_bytes_per_rank(n, k->as->replicas, 0) + (last ? 8 * (uint64_t)(k->as->replicas - 1) : 0);
    if (!on_device)
        return err_set(err, 500, "internal", NULL, "an NCCL group on a stage whose gradients are not on the GPU");
    if (last && nccl_pass_loss(k->nccl, tasklet_loss_mean(k), &k->ring_prev_loss, timeout_s, err) != 0)
        return -1;
    return nccl_allreduce_sum(k->nccl, g, n, timeout_s, err);
}

/* every_step: sums the replicas' gradients of this stage: in place on the
 * GPU with NCCL, or over the TCP ring (from a host copy when they live on a
 * GPU). */
static int every_step_gradients(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    if (k->as->replicas == 1)
        return 0;
    struct kern_err ke = {{0}};
    int on_device = 0, rc = -1;
    double t0 = ctl_now();
    size_t n = kern_stage_param_count(k->st);
    uint64_t sent0 = k->ring_next.bytes_sent;
    float *g = kern_stage_grad_buffer(k->st, &on_device), *host = NULL;
    if (k->nccl) {
        rc = nccl_gradients(k, g, n, on_device, err);
        goto out;
    }
    if (on_device) {
        if (!(host = malloc(n * sizeof *host))) {
            err_set(err, 500, "internal", NULL, "out of memory for the gradient all-reduce");
            goto out;
        }
        if (kern_stage_read(k->st, KERN_GRADS, host, &ke) != 0) {
            tasklet_kern_failed(&ke, err);
            goto out;
        }
        g = host;
    }
    struct ring r = tasklet_ring(k);
    /* The last stage's losses go round first: one that dies after the
     * all-reduce leaves its loss with the next replica (ring.h). */
    if ((k->as->stage == k->as->stages - 1 && ring_pass_loss(&r, tasklet_loss_mean(k), &k->ring_prev_loss, t,
                                                             err) != 0) ||
        ring_allreduce_sum(&r, g, n, t, err) != 0) {
        tasklet_peer_failed(k, &k->as->ring_prev);
        goto out;
    }
    if (host && kern_stage_write(k->st, KERN_GRADS, host, &ke) != 0) {
        tasklet_kern_failed(&ke, err);
        goto out;
    }
    rc = 0;
out:
    k->dp_bytes += k->ring_next.bytes_sent - sent0;
    free(host);
    k->allreduce_s += ctl_now() - t0;
    return rc;
}

/* diloco: the outer weights are the stage's weights as loaded (a start, or
 * a checkpoint, which is always taken at an outer step); the outer
 * momentum and the error feedback come with the stage (zero, or the
 * checkpoint's). */
static int diloco_open(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct sync_state *s = &k->sync;
    struct kern_err ke = {{0}};
    size_t n = kern_stage_param_count(k->st);
    if (as->replicas > 1 && as->allreduce != ASSIGN_ALLREDUCE_RING)
        return err_set(err, 502, "bad_assignment", "allreduce", "sync \"diloco\" averages over the TCP ring, but "
                       "the assignment puts stage %d's group on NCCL", as->stage);
    s->outer = malloc(n * sizeof *s->outer);
    s->delta = malloc(n * sizeof *s->delta);
    s->momentum = kern_stage_extra(k->st, KERN_EXTRA_OUTER_MOMENTUM);
    s->feedback = as->sync_codec != CODEC_F32 ? kern_stage_extra(k->st, KERN_EXTRA_SYNC_FEEDBACK) : NULL;
    if (!s->outer || !s->delta || !s->momentum || (as->sync_codec != CODEC_F32 && !s->feedback))
        return err_set(err, 500, "internal", NULL, "out of memory for the outer weights");
    if (kern_stage_read(k->st, KERN_PARAMS, s->outer, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    return 0;
}

/* diloco: at the end of a phase, the outer step.  The pseudo-gradient
 * outer - local is averaged over the group (the ring, in the sync dtype,
 * with error feedback), then one Nesterov SGD step (PyTorch's form):
 *     u = mu u + delta;  outer = outer - lr (delta + mu u)
 * and every replica continues from the new outer weights. */
static int diloco_weights(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct sync_state *s = &k->sync;
    struct kern_err ke = {{0}};
    size_t n = kern_stage_param_count(k->st);
    int rc = -1;
    if (!sync_shared_after(as, (int64_t)t))
        return 0;
    double t0 = ctl_now();
    uint64_t sent0 = k->ring_next.bytes_sent;
    if (kern_stage_read(k->st, KERN_PARAMS, s->delta, &ke) != 0) {
        tasklet_kern_failed(&ke, err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        s->delta[i] = s->outer[i] - s->delta[i];
    if (as->replicas > 1) {
        struct ring r = tasklet_ring(k);
        if (ring_allreduce_codec(&r, s->delta, n, t, as->sync_codec, s->feedback, err) != 0) {
            tasklet_peer_failed(k, &k->as->ring_prev);
            goto out;
        }
        float inv = 1.0f / (float)as->replicas;
        for (size_t i = 0; i < n; i++)
            s->delta[i] *= inv;
    }
    float lr = (float)as->outer_lr, mu = (float)as->outer_momentum;
    for (size_t i = 0; i < n; i++) {
        s->momentum[i] = mu * s->momentum[i] + s->delta[i];
        s->outer[i] -= lr * (s->delta[i] + mu * s->momentum[i]);
    }
    if (kern_stage_write(k->st, KERN_PARAMS, s->outer, &ke) != 0) {
        tasklet_kern_failed(&ke, err);
        goto out;
    }
    rc = 0;
out:
    k->dp_bytes += k->ring_next.bytes_sent - sent0;
    k->allreduce_s += ctl_now() - t0;
    return rc;
}

/* The table: indexed by enum assign_sync. */
static const struct sync_mode modes[] = {
    [ASSIGN_SYNC_EVERY_STEP] = { "every_step", every_step_open, every_step_gradients, NULL, 1 },
    [ASSIGN_SYNC_DILOCO] = { "diloco", diloco_open, NULL, diloco_weights, 0 },
};

int sync_open(struct tasklet *k, struct shoal_err *err)
{
    return modes[k->as->sync].open(k, err);
}

void sync_close(struct tasklet *k)
{
    nccl_group_close(k->nccl);
    k->nccl = NULL;
    free(k->sync.outer);
    free(k->sync.delta);
    memset(&k->sync, 0, sizeof k->sync);   /* momentum and feedback are the stage's */
}

float sync_loss_scale(const struct assignment *as)
{
    int per = modes[as->sync].replicas_in_loss ? as->replicas : 1;
    return 1.0f / (float)(as->micro_batches * per);
}

int sync_gradients(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    return modes[k->as->sync].gradients ? modes[k->as->sync].gradients(k, t, err) : 0;
}

int sync_weights(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    return modes[k->as->sync].weights ? modes[k->as->sync].weights(k, t, err) : 0;
}

int sync_shared_after(const struct assignment *as, int64_t t)
{
    return as->sync == ASSIGN_SYNC_EVERY_STEP || (t + 1) % as->inner_steps == 0 || t + 1 == as->steps;
}
