/* train.c - one tasklet's training loop (train.h). */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "ckpt.h"
#include "data.h"
#include "nccl.h"
#include "ring.h"

#define TRAIN_PROGRESS_PATH "/v1/agent/progress"

struct tasklet {
    const struct train_env *env;
    const struct assignment *as;
    struct peer_auth auth;
    struct kern_stage *st;
    struct data_source data;
    int have_data;
    struct pipe_op *ops;                 /* 2M, this stage's order */
    struct peer_stream *prev, *next;     /* pipeline neighbours, NULL at the ends */
    struct peer_conn ring_prev, ring_next;   /* the TCP ring's, unused under NCCL */
    struct nccl_group *nccl;             /* the stage's NCCL group, or NULL */
    size_t btc;                          /* floats in one micro-batch's hidden state */
    float *x, *y;                        /* (B,T,C): input received, output computed */
    int32_t *tokens, *targets;           /* (B,T) */
    double *loss;                        /* per micro-batch, last stage */
    char failed_peer[ASSIGN_ADDR_MAX];
    /* the current step's times, s */
    double compute_s, allreduce_s, send_s, recv_s;
};

double train_lr(const struct assignment *as, int64_t t)
{
    double peak = as->learning_rate;
    if (t < as->warmup_steps)
        return peak * (double)(t + 1) / (double)as->warmup_steps;
    double span = (double)(as->steps - as->warmup_steps - 1);
    double progress = span > 0 ? (double)(t - as->warmup_steps) / span : 1.0;
    double floor = TRAIN_LR_FLOOR * peak;
    return floor + 0.5 * (peak - floor) * (1.0 + cos(M_PI * progress));
}

/* Notes which peer failed (the first one wins) and passes -1 up. */
static int peer_failed(struct tasklet *k, const char *addr)
{
    if (!k->failed_peer[0] && addr)
        snprintf(k->failed_peer, sizeof k->failed_peer, "%s", addr);
    return -1;
}

/* Waits on a neighbour last at most --peer-timeout in all, in slices of
 * this many ms, so that a changed assignment (the job is recovering) stops
 * the tasklet within a slice instead of at the timeout. */
#define TRAIN_WAIT_SLICE_MS 250

/* 1 when the tasklet should stop: its assignment changed, or the agent
 * is shutting down (SIGTERM). */
static int stopping(const struct tasklet *k)
{
    return atomic_load(k->env->abort) || (k->env->ctl->stop && atomic_load(k->env->ctl->stop));
}

/* After a call on stream `s` failed with one slice: 0 to wait another
 * slice, else -1 with err set (a real failure, the assignment changed, or
 * the whole timeout has passed). */
static int wait_more(const struct tasklet *k, const struct peer_stream *s, int *left_ms, int slice_ms,
                     struct shoal_err *err)
{
    if (strcmp(err->code, "peer_timeout") != 0)
        return -1;
    if ((*left_ms -= slice_ms) <= 0)
        return err_set(err, err->status, "peer_timeout", NULL, "peer %s did not keep up within %d s (--peer-timeout)",
                       peer_stream_addr(s), k->env->peer_timeout_ms / 1000);
    if (stopping(k))
        return err_set(err, 503, "aborted", NULL, "the assignment changed or the agent is stopping while waiting "
                       "on a neighbour");
    return 0;
}

/* peer_stream_recv of the frame (kind, t, m) into payload, within the peer
 * timeout (see TRAIN_WAIT_SLICE_MS). */
static int stream_recv(const struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, uint32_t m,
                       void *payload, size_t len, struct shoal_err *err)
{
    for (int left = k->env->peer_timeout_ms;;) {
        int slice = left < TRAIN_WAIT_SLICE_MS ? left : TRAIN_WAIT_SLICE_MS;
        if (peer_stream_recv(s, kind, t, m, payload, len, slice, err) == 0)
            return 0;
        if (wait_more(k, s, &left, slice, err) != 0)
            return -1;
    }
}

/* peer_stream_send within the peer timeout (see TRAIN_WAIT_SLICE_MS). */
static int stream_send(const struct tasklet *k, struct peer_stream *s, const struct wire_frame *f,
                       const void *payload, struct shoal_err *err)
{
    for (int left = k->env->peer_timeout_ms;;) {
        int slice = left < TRAIN_WAIT_SLICE_MS ? left : TRAIN_WAIT_SLICE_MS;
        if (peer_stream_send(s, f, payload, slice, err) == 0)
            return 0;
        if (wait_more(k, s, &left, slice, err) != 0)
            return -1;
    }
}

static int kern_failed(const struct kern_err *ke, struct shoal_err *err)
{
    return err_set(err, 500, "device_error", NULL, "%s", ke->msg);
}

/* Dials `addr` until its listener expects us (it may not have its
 * assignment yet) or the connect timeout passes. */
static int dial_until(struct tasklet *k, const char *addr, int stage, int replica, struct peer_conn *out,
                      struct shoal_err *err)
{
    char want[PEER_ROLE_MAX];
    assign_role(stage, replica, want);
    double until = ctl_now() + k->env->connect_timeout_ms / 1e3;
    for (;;) {
        if (peer_dial(addr, &k->auth, want, 5000, out, err) == 0)
            return 0;
        if (stopping(k) || ctl_now() > until)
            return peer_failed(k, addr);
        ctl_sleep(k->env->ctl, 0.2);
    }
}

static int take(struct tasklet *k, const char *addr, int stage, int replica, struct peer_conn *out,
                struct shoal_err *err)
{
    char role[PEER_ROLE_MAX];
    assign_role(stage, replica, role);
    if (peer_listener_take(k->env->listener, role, k->env->connect_timeout_ms, out, err) != 0)
        return peer_failed(k, addr);
    return 0;
}

/* Opens the pipeline streams and the ring connections. */
static int connect_neighbours(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct peer_conn c = { .fd = -1 };
    int queue = as->micro_batches + 4, rc = -1;
    size_t cap = k->btc * sizeof(float);
    if (as->next_stage[0]) {
        if (dial_until(k, as->next_stage, as->stage + 1, as->replica, &c, err) != 0 ||
            peer_stream_start(&c, cap, queue, &k->next, err) != 0)
            goto out;
    }
    if (as->ring_next[0] &&
        dial_until(k, as->ring_next, as->stage, (as->replica + 1) % as->replicas, &k->ring_next, err) != 0)
        goto out;
    if (as->prev_stage[0]) {
        if (take(k, as->prev_stage, as->stage - 1, as->replica, &c, err) != 0 ||
            peer_stream_start(&c, cap, queue, &k->prev, err) != 0)
            goto out;
    }
    if (as->ring_prev[0] &&
        take(k, as->ring_prev, as->stage, (as->replica + as->replicas - 1) % as->replicas, &k->ring_prev, err) != 0)
        goto out;
    rc = 0;
out:
    peer_close(&c);
    return rc;
}

static int forward(struct tasklet *k, uint64_t t, int m, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    int B = as->micro_batch_size, T = kern_stage_spec(k->st)->seq_len;
    const void *input = k->x;
    if (k->have_data) {
        uint64_t first = ((uint64_t)as->replica * (uint64_t)as->micro_batches + (uint64_t)m) * (uint64_t)B;
        data_batch(&k->data, as->seed, t, first, B, T, k->tokens, k->targets);
        if (as->stage == 0)
            input = k->tokens;
    }
    if (k->prev && stream_recv(k, k->prev, WIRE_ACTIVATION, t, (uint32_t)m, k->x, k->btc * sizeof(float), err) != 0)
        return peer_failed(k, peer_stream_addr(k->prev));
    double t0 = ctl_now();
    float loss;
    int last = as->stage == as->stages - 1;
    if (kern_stage_forward(k->st, m, input, last ? k->targets : NULL, last ? &loss : k->y, &ke) != 0)
        return kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    if (last) {
        k->loss[m] = loss;
        return 0;
    }
    struct wire_frame f = { .kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .job_id = as->job_id, .epoch = as->epoch,
                            .micro_batch = (uint32_t)m, .step = t, .ndim = 3,
                            .shape = { (uint32_t)B, (uint32_t)T, (uint32_t)as->model.d_model },
                            .payload_len = k->btc * sizeof(float) };
    if (stream_send(k, k->next, &f, k->y, err) != 0)
        return peer_failed(k, peer_stream_addr(k->next));
    return 0;
}

static int backward(struct tasklet *k, uint64_t t, int m, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    /* The objective is the mean loss over M micro-batches and D replicas. */
    float dloss = 1.0f / (float)(as->micro_batches * as->replicas);
    const float *grad_output = &dloss;
    if (k->next) {
        if (stream_recv(k, k->next, WIRE_ACTIVATION_GRAD, t, (uint32_t)m, k->y, k->btc * sizeof(float), err) != 0)
            return peer_failed(k, peer_stream_addr(k->next));
        grad_output = k->y;
    }
    double t0 = ctl_now();
    if (kern_stage_backward(k->st, m, grad_output, k->prev ? k->x : NULL, &ke) != 0)
        return kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    if (!k->prev)
        return 0;
    const struct kern_stage_spec *sp = kern_stage_spec(k->st);
    struct wire_frame f = { .kind = WIRE_ACTIVATION_GRAD, .dtype = WIRE_F32, .job_id = as->job_id,
                            .epoch = as->epoch, .micro_batch = (uint32_t)m, .step = t, .ndim = 3,
                            .shape = { (uint32_t)sp->micro_batch, (uint32_t)sp->seq_len,
                                       (uint32_t)as->model.d_model },
                            .payload_len = k->btc * sizeof(float) };
    if (stream_send(k, k->prev, &f, k->x, err) != 0)
        return peer_failed(k, peer_stream_addr(k->prev));
    return 0;
}

/* Joins the stage's NCCL group when the plan puts it on NCCL.  Every
 * member must come within the connect timeout. */
static int join_nccl(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    if (as->replicas == 1 || as->allreduce != ASSIGN_ALLREDUCE_NCCL)
        return 0;
    if (k->env->dev.kind != KERN_CUDA)
        return err_set(err, 409, "device_mismatch", NULL, "the plan sums stage %d's gradients with NCCL, but this "
                       "agent trains on the cpu; restart it with --device cuda", as->stage);
    return nccl_group_open(k->env->ctl, as->job_id, as->epoch, as->stage, as->replica, as->replicas,
                           k->env->dev.index, k->env->connect_timeout_ms / 1e3, &k->nccl, err);
}

/* Sums the replicas' gradients of this stage: in place on the GPU with
 * NCCL, or over the TCP ring (from a host copy when they live on a GPU). */
static int allreduce(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    if (k->as->replicas == 1)
        return 0;
    struct kern_err ke = {{0}};
    int on_device = 0, rc = -1;
    double t0 = ctl_now();
    size_t n = kern_stage_param_count(k->st);
    float *g = kern_stage_grad_buffer(k->st, &on_device), *host = NULL;
    if (k->nccl) {
        /* Which peer failed NCCL does not say: the report names none. */
        if (!on_device)
            err_set(err, 500, "internal", NULL, "an NCCL group on a stage whose gradients are not on the GPU");
        else if (nccl_allreduce_sum(k->nccl, g, n, k->env->peer_timeout_ms / 1e3, err) == 0)
            rc = 0;
        goto out;
    }
    if (on_device) {
        if (!(host = malloc(n * sizeof *host))) {
            err_set(err, 500, "internal", NULL, "out of memory for the gradient all-reduce");
            goto out;
        }
        if (kern_stage_read(k->st, KERN_GRADS, host, &ke) != 0) {
            kern_failed(&ke, err);
            goto out;
        }
        g = host;
    }
    struct ring r = { .next = &k->ring_next, .prev = &k->ring_prev, .rank = k->as->replica,
                      .size = k->as->replicas, .timeout_ms = k->env->peer_timeout_ms };
    if (ring_allreduce_sum(&r, g, n, t, err) != 0) {
        peer_failed(k, k->ring_prev.addr);
        goto out;
    }
    if (host && kern_stage_write(k->st, KERN_GRADS, host, &ke) != 0) {
        kern_failed(&ke, err);
        goto out;
    }
    rc = 0;
out:
    free(host);
    k->allreduce_s += ctl_now() - t0;
    return rc;
}

/* The squared gradient norm of the whole model: summed from stage 0 to the
 * last stage, which sends the total back down the pipeline. */
static int global_norm2(struct tasklet *k, uint64_t t, double *total, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    double mine, below = 0;
    struct wire_frame f = { .kind = WIRE_GRAD_NORM, .dtype = WIRE_BYTES, .job_id = as->job_id, .epoch = as->epoch,
                            .step = t, .payload_len = sizeof(double) };
    if (kern_stage_grad_norm2(k->st, &mine, &ke) != 0)
        return kern_failed(&ke, err);
    if (k->prev && stream_recv(k, k->prev, WIRE_GRAD_NORM, t, 0, &below, sizeof below, err) != 0)
        return peer_failed(k, peer_stream_addr(k->prev));
    *total = below + mine;
    if (k->next) {
        if (stream_send(k, k->next, &f, total, err) != 0)
            return peer_failed(k, peer_stream_addr(k->next));
        if (stream_recv(k, k->next, WIRE_GRAD_NORM, t, 1, total, sizeof *total, err) != 0)
            return peer_failed(k, peer_stream_addr(k->next));
    }
    f.micro_batch = 1;
    if (k->prev && stream_send(k, k->prev, &f, total, err) != 0)
        return peer_failed(k, peer_stream_addr(k->prev));
    return 0;
}

static void take_waits(struct tasklet *k)
{
    struct peer_stream *s[2] = { k->prev, k->next };
    for (int i = 0; i < 2; i++) {
        double send = 0, recv = 0;
        if (s[i])
            peer_stream_take_waits(s[i], &send, &recv);
        k->send_s += send;
        k->recv_s += recv;
    }
}

static void post_progress(struct tasklet *k, uint64_t t, double iteration_s)
{
    const struct assignment *as = k->as;
    const struct kern_stage_spec *sp = kern_stage_spec(k->st);
    json_t *body = json_pack("{s:I, s:I, s:I, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I}",
        "job_id", (json_int_t)as->job_id, "epoch", (json_int_t)as->epoch, "step", (json_int_t)t,
        "stage", as->stage, "replica", as->replica, "iteration_s", iteration_s, "compute_s", k->compute_s,
        "send_s", k->send_s, "recv_wait_s", k->recv_s, "allreduce_s", k->allreduce_s,
        /* Waiting on a neighbour is, on these schedules, mostly the pipeline's
         * bubble; the transfer itself overlaps the neighbour's compute. */
        "bubble_s", k->recv_s,
        "tokens", (json_int_t)as->micro_batches * sp->micro_batch * sp->seq_len);
    if (as->stage == as->stages - 1) {
        double sum = 0;
        for (int m = 0; m < as->micro_batches; m++)
            sum += k->loss[m];
        json_object_set_new(body, "loss", json_real(sum / as->micro_batches));
        log_info("step job=%lld step=%llu replica=%d loss=%.6f iteration_s=%.3f", (long long)as->job_id,
                 (unsigned long long)t, as->replica, sum / as->micro_batches, iteration_s);
    }
    report_post(k->env->reporter, TRAIN_PROGRESS_PATH, body);
}

/* One training step; on error the stage's micro-batches in flight are dropped
 * and no optimizer step has been taken. */
static int train_step(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    double start = ctl_now(), norm2;
    k->compute_s = k->allreduce_s = k->send_s = k->recv_s = 0;
    if (kern_stage_zero_grad(k->st, &ke) != 0)
        return kern_failed(&ke, err);
    for (int i = 0; i < 2 * as->micro_batches; i++) {
        int m = k->ops[i].micro_batch;
        if ((k->ops[i].kind == PIPE_FORWARD ? forward(k, t, m, err) : backward(k, t, m, err)) != 0)
            goto fail;
    }
    if (allreduce(k, t, err) != 0 || global_norm2(k, t, &norm2, err) != 0)
        goto fail;
    double norm = sqrt(norm2);
    double scale = as->grad_clip > 0 && norm > as->grad_clip ? as->grad_clip / norm : 1.0;
    struct kern_adamw h = { .lr = (float)train_lr(as, (int64_t)t), .beta1 = TRAIN_ADAM_BETA1,
                            .beta2 = TRAIN_ADAM_BETA2, .eps = TRAIN_ADAM_EPS,
                            .weight_decay = (float)as->weight_decay, .grad_scale = (float)scale };
    double t0 = ctl_now();
    if (kern_stage_adamw(k->st, &h, &ke) != 0)
        return kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    int64_t done = (int64_t)t + 1;
    if (as->replica == 0 && (done == as->steps ||
                             (as->checkpoint_interval > 0 && done % as->checkpoint_interval == 0)) &&
        ckpt_queue_upload(k->env->reporter, k->env->data_dir, k->st, as->job_id, done, as->stage, err) != 0)
        return -1;
    take_waits(k);
    post_progress(k, t, ctl_now() - start);
    return 0;
fail:
    kern_stage_drop_in_flight(k->st);
    return -1;
}

/* Allocates the stage, its buffers and the data; loads the resume point. */
static int tasklet_open(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    int B = as->micro_batch_size, T = as->model.context, M = as->micro_batches;
    int first = as->stage == 0, last = as->stage == as->stages - 1;
    if (!(k->ops = calloc((size_t)(2 * M), sizeof *k->ops)))
        return err_set(err, 500, "internal", NULL, "out of memory");
    struct kern_stage_spec sp = { .layer_start = as->layer_start, .layer_end = as->layer_end, .first = first,
                                  .last = last, .micro_batch = B, .seq_len = T,
                                  .in_flight = pipe_schedule(as->schedule, as->stage, as->stages, M, k->ops),
                                  .seed = as->seed };
    if (kern_stage_new(&k->env->dev, &as->model, &sp, &k->st, &ke) != 0)
        return kern_failed(&ke, err);
    k->btc = (size_t)B * T * (size_t)as->model.d_model;
    k->x = malloc(k->btc * sizeof(float));
    k->y = malloc(k->btc * sizeof(float));
    k->tokens = malloc((size_t)B * T * sizeof(int32_t));
    k->targets = malloc((size_t)B * T * sizeof(int32_t));
    k->loss = calloc((size_t)M, sizeof(double));
    if (!k->x || !k->y || !k->tokens || !k->targets || !k->loss)
        return err_set(err, 500, "internal", NULL, "out of memory for activations");
    if (first || last) {
        if (data_open(as->data_path, as->data_format, as->model.vocab, T, &k->data, err) != 0)
            return -1;
        k->have_data = 1;
    }
    if (as->resume_job > 0) {
        if (ckpt_restore(k->env->ctl, k->env->data_dir, k->st, as, err) != 0)
            return -1;
        log_info("resumed job=%lld stage=%d from job=%lld step=%lld", (long long)as->job_id, as->stage,
                 (long long)as->resume_job, (long long)as->resume_step);
    }
    return 0;
}

/* How many of the tasklet's peer connections are encrypted, of *links. */
static int encrypted_links(const struct tasklet *k, int *links)
{
    const struct peer_conn *ring[2] = { &k->ring_prev, &k->ring_next };
    const struct peer_stream *pipe[2] = { k->prev, k->next };
    int n = 0;
    *links = 0;
    for (int i = 0; i < 2; i++) {
        *links += (ring[i]->fd >= 0) + (pipe[i] != NULL);
        n += (ring[i]->fd >= 0 && ring[i]->seal) + (pipe[i] && peer_stream_encrypted(pipe[i]));
    }
    return n;
}

static void tasklet_close(struct tasklet *k)
{
    peer_stream_stop(k->prev);
    peer_stream_stop(k->next);
    peer_close(&k->ring_prev);
    peer_close(&k->ring_next);
    nccl_group_close(k->nccl);
    kern_stage_free(k->st);
    if (k->have_data)
        data_close(&k->data);
    free(k->ops);
    free(k->x);
    free(k->y);
    free(k->tokens);
    free(k->targets);
    free(k->loss);
}

enum train_result train_run(const struct train_env *env, const struct assignment *as, char failed_peer[ASSIGN_ADDR_MAX],
                            struct shoal_err *err)
{
    struct tasklet k = { .env = env, .as = as, .ring_prev = { .fd = -1 }, .ring_next = { .fd = -1 } };
    enum train_result res = TRAIN_FAILED;
    memcpy(k.auth.secret, as->secret, as->secret_len);
    k.auth.secret_len = as->secret_len;
    k.auth.job_id = as->job_id;
    k.auth.epoch = as->epoch;
    assign_role(as->stage, as->replica, k.auth.role);
    k.auth.encrypt = peer_listener_encryption(env->listener); /* --peer-encryption */
    peer_listener_expect(env->listener, &k.auth);
    if (tasklet_open(&k, err) != 0 || connect_neighbours(&k, err) != 0 || join_nccl(&k, err) != 0)
        goto out;
    int links, encrypted = encrypted_links(&k, &links);
    log_info("tasklet connected job=%lld epoch=%u stage=%d replica=%d layers=%d..%d encrypted=%d/%d",
             (long long)as->job_id, as->epoch, as->stage, as->replica, as->layer_start, as->layer_end, encrypted,
             links);
    for (uint64_t t = (uint64_t)as->resume_step; t < (uint64_t)as->steps; t++) {
        if (stopping(&k)) {
            res = TRAIN_ABORTED;
            goto out;
        }
        atomic_store(env->step, (long long)t);
        if (train_step(&k, t, err) != 0)
            goto out;
    }
    /* The neighbours still read what we queued last. */
    if ((k.prev && peer_stream_flush(k.prev, env->peer_timeout_ms, err) != 0) ||
        (k.next && peer_stream_flush(k.next, env->peer_timeout_ms, err) != 0))
        goto out;
    res = TRAIN_DONE;
out:
    if (res == TRAIN_FAILED && stopping(&k))
        res = TRAIN_ABORTED;
    peer_listener_expect(env->listener, NULL);
    snprintf(failed_peer, ASSIGN_ADDR_MAX, "%s", k.failed_peer);
    tasklet_close(&k);
    return res;
}
