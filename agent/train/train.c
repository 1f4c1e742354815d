/* train.c - one tasklet's training loop (train.h). */
#include "train.h"

#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/log.h"
#include "../../common/patience.h"
#include "ckpt.h"
#include "eval.h"
#include "live.h"
#include "tasklet.h"

#define TRAIN_PROGRESS_PATH "/v1/agent/progress"

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

/* Dials neighbour p (directly, or through the plan's relay) until its
 * listener expects us (it may not have its assignment yet) or the connect
 * timeout passes. */
static int dial_until(struct tasklet *k, const struct assign_peer *p, struct peer_conn *out, struct shoal_err *err)
{
    char want[PEER_ROLE_MAX];
    wire_role(p->stage, p->replica, p->node, want);
    double until = ctl_now() + k->env->connect_timeout_ms / 1e3;
    for (;;) {
        int left_ms = (int)((until - ctl_now()) * 1e3);
        if ((p->way == ASSIGN_RELAY_DIAL
                 ? peer_dial_relayed(k->as->relay, &p->ticket, &k->auth, want, p->channel,
                                     left_ms > 5000 ? left_ms : 5000, out, err)
                 : peer_dial_channel(p->addr, &k->auth, want, p->channel, 5000, out, err)) == 0)
            return 0;
        if (tasklet_stopping(k) || ctl_now() > until)
            return tasklet_peer_failed(k, p);
        ctl_sleep(k->env->ctl, 0.2);
    }
}

/* Waits for neighbour p's connection (dialled to us, or paired by the
 * relay); a tasklet whose job was re-planned meanwhile (a neighbour that
 * died before it dialled) stops within a slice instead of at
 * --connect-timeout. */
static int take(struct tasklet *k, const struct assign_peer *p, struct peer_conn *out, struct shoal_err *err)
{
    char role[PEER_ROLE_MAX];
    struct peer_stop stop = tasklet_peer_stop(k);
    wire_role(p->stage, p->replica, p->node, role);
    if (peer_listener_take_stop(k->env->listener, role, p->channel, k->env->connect_timeout_ms, &stop, out, err) != 0)
        return tasklet_peer_failed(k, p);
    return 0;
}

/* The three passes of connect_neighbours. */
enum link_pass { PASS_RELAY, PASS_DIAL, PASS_TAKE };

/* Does pass `pass` of the connection to neighbour p: PASS_RELAY asks the
 * relay for the relayed connections we answer (that never waits for
 * anyone), PASS_DIAL dials (directly or through the relay), PASS_TAKE
 * takes what was dialled to us or paired.  A pipeline link (stream non-NULL)
 * becomes a stream; a ring or tied-head edge stays the connection *c. */
static int link_pass(struct tasklet *k, const struct assign_peer *p, enum link_pass pass, struct peer_conn *c,
                     struct peer_stream **stream, struct shoal_err *err)
{
    char role[PEER_ROLE_MAX];
    int dials = p->way == ASSIGN_DIAL || p->way == ASSIGN_RELAY_DIAL, rc = -1;
    if (!p->addr[0])
        return 0;
    if (pass == PASS_RELAY) {
        if (p->way != ASSIGN_RELAY_TAKE)
            return 0;
        /* the relay may be starting again (a restart is a recovery) */
        wire_role(p->stage, p->replica, p->node, role);
        double until = ctl_now() + k->env->connect_timeout_ms / 1e3;
        while (peer_listener_relay(k->env->listener, k->as->relay, &p->ticket, role, p->channel, 5000,
                                   k->env->connect_timeout_ms, err) != 0) {
            if (tasklet_stopping(k) || ctl_now() > until)
                return tasklet_peer_failed(k, p);
            ctl_sleep(k->env->ctl, 0.2);
        }
        return 0;
    }
    if (dials != (pass == PASS_DIAL))
        return 0;
    if ((dials ? dial_until(k, p, c, err) : take(k, p, c, err)) != 0)
        goto out;
    if (stream && peer_stream_start(c, k->btc * sizeof(float), k->as->micro_batches + 4, stream, err) != 0)
        goto out;
    rc = 0;
out:
    if (stream)
        peer_close(c);
    return rc;
}

/* Opens the pipeline streams, the ring's and the tied head's connections,
 * in three passes: the relayed connections we answer are asked for first
 * (at once), then every connection we dial, then every one we take.  A
 * take waits only for a dial, and a dial only for the other end's first
 * pass, so whichever way the plan turns each link, nobody waits in a
 * circle. */
static int connect_neighbours(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct peer_conn next = { .fd = -1 }, prev = { .fd = -1 };
    for (enum link_pass pass = PASS_RELAY; pass <= PASS_TAKE; pass++)
        if (link_pass(k, &as->next_stage, pass, &next, &k->next, err) != 0 ||
            link_pass(k, &as->prev_stage, pass, &prev, &k->prev, err) != 0 ||
            link_pass(k, &as->ring_next, pass, &k->ring_next, NULL, err) != 0 ||
            link_pass(k, &as->ring_prev, pass, &k->ring_prev, NULL, err) != 0 ||
            link_pass(k, &as->tie_peer, pass, &k->tie_next, NULL, err) != 0 ||
            link_pass(k, &as->tie_back, pass, &k->tie_prev, NULL, err) != 0)
            return -1;
    return 0;
}

static int forward(struct tasklet *k, uint64_t t, int m, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    int B = as->micro_batch_size, T = kern_stage_spec(k->st)->seq_len;
    const void *input = k->x;
    if (k->have_data) {
        uint64_t first = ((uint64_t)as->replica * (uint64_t)as->micro_batches + (uint64_t)m) * (uint64_t)B;
        if (data_batch(&k->data, as->seed, t, first, B, T, k->tokens, k->targets, err) != 0)
            return -1;
        if (as->stage == 0)
            input = k->tokens;
    }
    if (k->prev && tasklet_recv_tensor(k, k->prev, WIRE_ACTIVATION, t, m, k->x, err) != 0)
        return -1;
    double t0 = ctl_now();
    float loss;
    int last = as->stage == as->stages - 1;
    if (kern_stage_forward(k->st, m, input, last ? k->targets : NULL, last ? &loss : k->y, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    if (last) {
        k->loss[m] = loss;
        return 0;
    }
    return tasklet_send_tensor(k, k->next, WIRE_ACTIVATION, t, m, k->y, err);
}

static int backward(struct tasklet *k, uint64_t t, int m, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    /* The objective: the mean loss over the micro-batches the sync mode
     * averages (sync.h). */
    float dloss = sync_loss_scale(k->as);
    const float *grad_output = &dloss;
    if (k->next) {
        if (tasklet_recv_tensor(k, k->next, WIRE_ACTIVATION_GRAD, t, m, k->y, err) != 0)
            return -1;
        grad_output = k->y;
    }
    double t0 = ctl_now();
    if (kern_stage_backward(k->st, m, grad_output, k->prev ? k->x : NULL, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    if (!k->prev)
        return 0;
    return tasklet_send_tensor(k, k->prev, WIRE_ACTIVATION_GRAD, t, m, k->x, err);
}

/* The squared gradient norm of the replica's whole model: summed from
 * stage 0 to the last stage, which sends the total back down the pipeline. */
static int global_norm2(struct tasklet *k, uint64_t t, double *total, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    double mine, below = 0, t0 = ctl_now();
    if (kern_stage_grad_norm2(k->st, &mine, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    if (k->prev && tasklet_recv_bytes(k, k->prev, WIRE_GRAD_NORM, t, 0, &below, sizeof below, err) != 0)
        return -1;
    *total = below + mine;
    if (k->next && (tasklet_send_bytes(k, k->next, WIRE_GRAD_NORM, t, 0, total, sizeof *total, err) != 0 ||
                    tasklet_recv_bytes(k, k->next, WIRE_GRAD_NORM, t, 1, total, sizeof *total, err) != 0))
        return -1;
    if (k->prev && tasklet_send_bytes(k, k->prev, WIRE_GRAD_NORM, t, 1, total, sizeof *total, err) != 0)
        return -1;
    return 0;
}

/* Adds the waits on the pipeline streams since the last call to the
 * step's parts: the send waits to *send, the receive waits to *recv (the
 * step's recv_wait_s or bubble_s); NULL drops them (validation's: they are
 * part of its own time). */
static void take_waits(struct tasklet *k, double *send, double *recv)
{
    struct peer_stream *s[2] = { k->prev, k->next };
    for (int i = 0; i < 2; i++) {
        double sw = 0, rw = 0;
        if (!s[i])
            continue;
        peer_stream_take_waits(s[i], &sw, &rw);
        if (send)
            *send += sw;
        if (recv)
            *recv += rw;
    }
}

/* Adds the bytes queued on the pipeline streams since the last call to
 * the step's pipe_bytes. */
static void take_queued(struct tasklet *k, uint64_t *queued)
{
    struct peer_stream *s[2] = { k->prev, k->next };
    for (int i = 0; i < 2; i++) {
        if (!s[i])
            continue;
        uint64_t q = peer_stream_queued_bytes(s[i]);
        k->pipe_bytes += q - queued[i];
        queued[i] = q;
    }
}

/* Reports step t.  Its parts are disjoint stretches of iteration_s, each
 * timed where it happens, so they add up to at most iteration_s (docs/api.md,
 * the step parts under /metrics):
 *   compute_s    the kernels: forward, backward, gradient norm, optimizer;
 *   send_s       blocked on a full send queue to a pipeline neighbour;
 *   bubble_s     waiting for the step's first activation and first
 *                activation gradient and for the global gradient norm: the
 *                pipeline's fill and drain, which the schedule imposes;
 *   recv_wait_s  waiting for every other activation or gradient: transfers
 *                and neighbours slower than this stage's own work;
 *   allreduce_s  the data-parallel group's exchange (and DiLoCo's outer step).
 * The rest (validation, eval_s; handing a checkpoint to the uploader; data
 * loading and codecs) is in no part. */
static void post_progress(struct tasklet *k, uint64_t t, double iteration_s, double eval_s)
{
    const struct assignment *as = k->as;
    const struct kern_stage_spec *sp = kern_stage_spec(k->st);
    json_t *body = json_pack("{s:I, s:I, s:I, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I}",
        "job_id", (json_int_t)as->job_id, "epoch", (json_int_t)as->epoch, "step", (json_int_t)t,
        "stage", as->stage, "replica", as->replica, "iteration_s", iteration_s, "compute_s", k->compute_s,
        "send_s", k->send_s, "recv_wait_s", k->recv_wait_s, "allreduce_s", k->allreduce_s,
        "bubble_s", k->bubble_s,
        "tokens", (json_int_t)as->micro_batches * sp->micro_batch * sp->seq_len,
        "stage_link_bytes", (json_int_t)k->pipe_bytes, "sync_bytes", (json_int_t)k->dp_bytes);
    if (eval_s > 0)
        json_object_set_new(body, "eval_s", json_real(eval_s));
    if (k->ckpt_fault[0]) {   /* this node's disk refused the step's checkpoint: its uploads' fault */
        json_object_set_new(body, "checkpoint_error", json_string(k->ckpt_fault));
        k->ckpt_fault[0] = '\0';
    }
    if (as->stage == as->stages - 1) {
        double loss = tasklet_loss_mean(k);
        json_object_set_new(body, "loss", json_real(loss));
        if (!isnan(k->ring_prev_loss))   /* the previous replica's, kept should it die before its report */
            json_object_set_new(body, "ring_prev_loss", json_real(k->ring_prev_loss));
        log_info("step job=%lld step=%llu replica=%d loss=%.6f iteration_s=%.3f", (long long)as->job_id,
                 (unsigned long long)t, as->replica, loss, iteration_s);
        if (eval_s > 0) {   /* this replica's share of the validation sequences */
            json_object_set_new(body, "val_micro_batches", json_integer(k->val_count));
            if (k->val_count > 0)
                json_object_set_new(body, "val_loss", json_real(k->val_loss));
        }
    }
    /* The last step's report too goes at once, whatever the uploads: the
     * server counts the job trained, and calls it succeeded once its final
     * checkpoint is stored as well (h_progress.c). */
    report_post(k->env->reporter, TRAIN_PROGRESS_PATH, body);
}

/* 1 when a checkpoint is taken after step t: every checkpoint_interval
 * steps and at the end.  Under diloco every replica saves its own file
 * (its AdamW moments are its own); else replica 0 saves the stage's. */
static int checkpoint_due(const struct assignment *as, int64_t t)
{
    int64_t done = t + 1;
    return (as->replica == 0 || as->sync == ASSIGN_SYNC_DILOCO) &&
           (done == as->steps || (as->checkpoint_interval > 0 && done % as->checkpoint_interval == 0));
}

/* Saves checkpoint `step` (after step - 1) and queues its upload.  A disk
 * of this node's that refuses the file (full, read-only: ckpt.h's
 * CKPT_LOCAL_STORAGE) fails nothing: it is a fault of this node's
 * uploads, not of the step, the job or a link, said in the step's
 * progress report (k->ckpt_fault; the server shows it on the node and the
 * job), and training goes on.  The next checkpoint tries again; the final
 * one is owed (k->ckpt_owed) until final_checkpoint writes it.  Returns 0,
 * or -1 with err set when the stage itself could not be saved. */
static int checkpoint_save(struct tasklet *k, int64_t step, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct shoal_err e;
    int owed = k->ckpt_owed;
    k->ckpt_owed = 0;
    if (ckpt_queue_upload(k->env->reporter, k->env->data_dir, k->st, as->job_id, step, as->stage,
                          as->sync == ASSIGN_SYNC_DILOCO ? as->replica : 0, &e) == 0) {
        if (owed)
            log_info("final checkpoint job=%lld step=%lld stage=%d written: this node's disk has room again",
                     (long long)as->job_id, (long long)step, as->stage);
        return 0;
    }
    if (strcmp(e.code, CKPT_LOCAL_STORAGE) != 0) {
        *err = e;
        return -1;
    }
    k->ckpt_owed = step == as->steps;
    if (!owed)   /* a final checkpoint's tries after the first: said once */
        log_warn("checkpoint job=%lld step=%lld stage=%d not kept, training goes on: %s%s", (long long)as->job_id,
                 (long long)step, as->stage, e.message,
                 k->ckpt_owed ? " (the final one: tried again until this node's disk takes it)" : "");
    snprintf(k->ckpt_fault, sizeof k->ckpt_fault, "%s", e.message);
    return 0;
}

#define TRAIN_DISK_RETRY_S 5.0   /* s between tries of a final checkpoint this node's disk refused */

/* Writes the final checkpoint that this node's disk refused, trying every
 * TRAIN_DISK_RETRY_S, since the job succeeds only once it is stored; the
 * server shows the fault on the node and the job meanwhile.  Returns 0
 * once it is queued, or -1 with err set when the tasklet is told to stop
 * (its job cancelled or re-planned) or the stage cannot be saved. */
static int final_checkpoint(struct tasklet *k, struct shoal_err *err)
{
    while (k->ckpt_owed) {
        for (double until = ctl_now() + TRAIN_DISK_RETRY_S; ctl_now() < until;) {
            if (tasklet_stopping(k))
                return err_set(err, 503, "aborted", NULL, "stopped while the final checkpoint waited for room "
                               "on this node's disk");
            ctl_sleep(k->env->ctl, 0.25);
        }
        k->ckpt_fault[0] = '\0';
        if (checkpoint_save(k, k->as->steps, err) != 0)
            return -1;
    }
    return 0;
}

/* A fault for the tests (test_recovery.sh): with
 * SHOAL_AGENT_FAULT_EXIT_AFTER_SYNC=T in its environment the agent dies
 * at once, as under kill -9, right after step T's all-reduce and global
 * norm, before its optimizer step and its report: the window in which its
 * stage's other replicas finish a step that it never reports. */
static void fault_exit_after_sync(uint64_t t)
{
    const char *v = getenv("SHOAL_AGENT_FAULT_EXIT_AFTER_SYNC");
    if (v && *v && strtoull(v, NULL, 10) == t) {
        log_warn("SHOAL_AGENT_FAULT_EXIT_AFTER_SYNC=%s: exiting after step %llu's all-reduce", v,
                 (unsigned long long)t);
        _exit(137);
    }
}

/* One training step; on error the stage's micro-batches in flight are dropped
 * and no optimizer step has been taken. */
/* The two copies of a tied model's shared matrix (wte on stage 0, head on
 * the last stage) sum their gradients over a ring of the two, so both
 * hold the same bits (a sum of two is the same in either order). */
static int tie_exchange(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    size_t off, count;
    struct kern_err ke = {{0}};
    int on_device;
    float *g = kern_stage_grad_buffer(k->st, &on_device);
    if (!kern_stage_tied_tensor(k->st, &off, &count))
        return err_set(err, 500, "internal", NULL, "stage %d holds no copy of the tied matrix", k->as->stage);
    /* on a GPU, through a host copy of the one tensor, allocated once */
    if (on_device && !k->tie_host && !(k->tie_host = malloc(count * sizeof *k->tie_host)))
        return err_set(err, 500, "internal", NULL, "out of memory for the tied matrix's gradient");
    if (on_device && kern_stage_range(k->st, KERN_GRADS, off, count, k->tie_host, 1, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    struct ring r = { .next = &k->tie_next, .prev = &k->tie_prev, .rank = k->as->stage == 0 ? 0 : 1, .size = 2,
                      .timeout_ms = k->env->peer_timeout_ms, .stop = tasklet_peer_stop(k) };
    double t0 = ctl_now();
    if (ring_allreduce_sum(&r, on_device ? k->tie_host : g + off, count, t, err) != 0)
        return tasklet_peer_failed(k, &k->as->tie_peer);
    k->allreduce_s += ctl_now() - t0;
    k->dp_bytes += 4 * (uint64_t)count;
    if (on_device && kern_stage_range(k->st, KERN_GRADS, off, count, k->tie_host, 0, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    return 0;
}

static int train_step(struct tasklet *k, uint64_t t, uint64_t *queued, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    double start = ctl_now(), norm2, eval_s = 0;
    int first_forward = 1, first_backward = 1;
    take_waits(k, NULL, NULL);   /* a failed step's, if any */
    k->compute_s = k->allreduce_s = k->send_s = k->recv_wait_s = k->bubble_s = 0;
    k->pipe_bytes = k->dp_bytes = 0;
    k->ring_prev_loss = NAN;
    if (kern_stage_zero_grad(k->st, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    for (int i = 0; i < 2 * as->micro_batches; i++) {
        int m = k->ops[i].micro_batch, fwd = k->ops[i].kind == PIPE_FORWARD;
        if ((fwd ? forward(k, t, m, err) : backward(k, t, m, err)) != 0)
            goto fail;
        /* The first activation waits out the pipeline's fill (the stages
         * before this one compute their first forward), the first gradient
         * its turn (the stages after it run their forwards and first
         * backward); a later wait is a tensor that came late. */
        int opens = fwd ? first_forward : first_backward;
        take_waits(k, &k->send_s, opens ? &k->bubble_s : &k->recv_wait_s);
        if (fwd)
            first_forward = 0;
        else
            first_backward = 0;
    }
    /* A tied head and embedding take their summed gradient before the
     * group's sync and the norm (kernels.h): on this stage, or with the
     * other end of the pipeline. */
    if (kern_stage_tie_grads(k->st, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    if (k->as->tie_peer.addr[0] && tie_exchange(k, t, err) != 0)
        goto fail;
    if (sync_gradients(k, t, err) != 0 || global_norm2(k, t, &norm2, err) != 0)
        goto fail;
    /* The norm passes stage 0's last backward down the pipeline: the drain. */
    take_waits(k, &k->send_s, &k->bubble_s);
    fault_exit_after_sync(t);
    double norm = sqrt(norm2);
    double scale = as->grad_clip > 0 && norm > as->grad_clip ? as->grad_clip / norm : 1.0;
    struct kern_adamw h = { .lr = (float)train_lr(as, (int64_t)t), .beta1 = TRAIN_ADAM_BETA1,
                            .beta2 = TRAIN_ADAM_BETA2, .eps = TRAIN_ADAM_EPS,
                            .weight_decay = (float)as->weight_decay, .grad_scale = (float)scale };
    double t0 = ctl_now();
    if (kern_stage_adamw(k->st, &h, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    k->compute_s += ctl_now() - t0;
    int rc = sync_weights(k, t, err);
    if (rc == 0 && eval_due(as, (int64_t)t)) {
        t0 = ctl_now();
        rc = eval_run(k, t, err);
        eval_s = rc == 0 ? ctl_now() - t0 : 0;
        take_waits(k, NULL, NULL);   /* in eval_s */
    }
    if (rc == 0 && checkpoint_due(as, (int64_t)t))
        rc = checkpoint_save(k, (int64_t)t + 1, err);
    /* The optimizer step is taken: it is reported even when what follows
     * failed, so that a live resume from this stage's state (live.h) finds
     * its step recorded. */
    take_queued(k, queued);
    post_progress(k, t, ctl_now() - start, eval_s);
    return rc;
fail:
    kern_stage_drop_in_flight(k->st);
    return -1;
}

#define TRAIN_CLAIM_POLL_S 0.25   /* between asking whether every member has said what it holds */

/* Says which copy of `source` this node opened (its manifest's SHA-256,
 * or null: none) and waits for the job's answer (h_dataset.c): the job's
 * own digest, or the one its members agreed on, into job_sha ("" when
 * that is "no manifest").  The wait ends when every member of the epoch
 * has spoken, within --connect-timeout. */
static int claim_dataset(struct tasklet *k, const char *source, const struct data_source *src,
                         char job_sha[SHA256_HEX], struct shoal_err *err)
{
    const struct assignment *as = k->as;
    double deadline = ctl_now() + k->env->connect_timeout_ms / 1000.0;
    int rc = -1;
    json_t *body = json_pack("{s:I, s:I, s:s, s:s?}", "job_id", (json_int_t)as->job_id, "epoch",
                             (json_int_t)as->epoch, "source", source, "sha256",
                             src->identity[0] ? src->identity : NULL);
    if (!body)
        return err_set(err, 500, "internal", NULL, "out of memory");
    for (;;) {
        long status = 0;
        json_t *ans = NULL;
        if (ctl_call(k->env->ctl, "POST", "/v1/agent/dataset", body, PATIENCE_AGENT_CALL_S, &status, &ans, err) == 0 &&
            status == 200) {
            const char *got = json_string_value(json_object_get(ans, "sha256"));
            snprintf(job_sha, SHA256_HEX, "%s", got ? got : "");
            json_decref(ans);
            rc = 0;
            break;
        }
        json_decref(ans);
        if (status >= 400 && status < 500 && status != 429)
            break;   /* err holds the server's reason: a disagreement fails the job there */
        if (tasklet_stopping(k)) {
            err_set(err, 503, "aborted", NULL, "the assignment changed while waiting for the dataset's members");
            break;
        }
        if (ctl_now() > deadline) {
            err_set(err, 504, "peer_timeout", NULL, "not every node of job %lld that reads its %s said which copy "
                    "it holds within %d s (--connect-timeout)", (long long)as->job_id, source,
                    k->env->connect_timeout_ms / 1000);
            break;
        }
        ctl_sleep(k->env->ctl, TRAIN_CLAIM_POLL_S);   /* 202: others still to speak; or no answer yet */
    }
    json_decref(body);
    return rc;
}

/* Proves that this node's copy of a dataset is the job's: its manifest's
 * SHA-256 (none: "") against the job's (data.sha256 or validation.sha256,
 * or what its members agreed on), which the assignment carries once it is
 * known and claim_dataset asks for before.  A text source has no
 * manifest: nothing to prove.  A mismatch is "invalid_dataset": the job
 * fails at once (agent.c), the message naming the node, the dataset and
 * both digests. */
static int prove_dataset(struct tasklet *k, const char *source, const char *path, const char *format,
                         const struct data_source *src, const char *recorded, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    const char *field = strcmp(source, "data") == 0 ? "data.path" : "validation.path";
    char job_sha[SHA256_HEX];
    snprintf(job_sha, sizeof job_sha, "%s", recorded);
    if (!job_sha[0] && strcmp(format, "text") == 0)
        return 0;
    if (!job_sha[0] && claim_dataset(k, source, src, job_sha, err) != 0)
        return -1;
    if (strcmp(job_sha, src->identity) == 0)
        return 0;
    if (!src->identity[0])
        return err_set(err, 422, "invalid_dataset", field, "node %lld opened %s '%s' without a manifest, but "
                       "job %lld names it by its manifest's SHA-256 %s", (long long)as->node_id, source, path,
                       (long long)as->job_id, job_sha);
    return err_set(err, 422, "invalid_dataset", field, "node %lld's copy of %s '%s' is not job %lld's: its "
                   "manifest's SHA-256 is %s, the job's %s", (long long)as->node_id, source, path,
                   (long long)as->job_id, src->identity, job_sha[0] ? job_sha : "none (no manifest)");
}

/* Maps the training data (first and last stages) and finds the
 * validation sequences: a held-out tail of it, or a file of their own. */
static int open_data(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    int T = as->model.context;
    if (as->stage != 0 && as->stage != as->stages - 1)
        return 0;
    if (data_open(k->env->roots, as->data_path, as->data_format, "train", as->model.vocab, T, k->env->data_dir,
                  &k->file, err) != 0)
        return -1;
    k->data = k->file;
    k->data.owner = 0;   /* a view: k->file is closed */
    k->have_data = 1;
    if (prove_dataset(k, "data", as->data_path, as->data_format, &k->file, as->data_sha256, err) != 0)
        return -1;
    if (!as->has_validation)
        return 0;
    if (as->val_holdout > 0) {
        if (data_holdout(&k->file, as->val_holdout, T, &k->data, &k->val, err) != 0)
            return -1;
    } else {
        if (data_open(k->env->roots, as->val_path, as->val_format, "val", as->model.vocab, T, k->env->data_dir,
                      &k->val_file, err) != 0) {
            snprintf(err->field, sizeof err->field, "validation.path");
            return -1;
        }
        k->val = k->val_file;
        k->val.owner = 0;
        if (prove_dataset(k, "validation", as->val_path, as->val_format, &k->val_file, as->val_sha256, err) != 0)
            return -1;
    }
    k->have_val = 1;
    return 0;
}

/* Allocates the stage, its buffers and the data; loads the resume point. */
static int tasklet_open(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    int B = as->micro_batch_size, T = as->model.context, M = as->micro_batches;
    int first = as->stage == 0, last = as->stage == as->stages - 1;
    if (!(k->ops = calloc((size_t)(2 * M), sizeof *k->ops)))
        return err_set(err, 500, "internal", NULL, "out of memory");
    struct kern_stage_spec sp = { .layer_start = as->layer_start, .layer_end = as->layer_end, .first = first,
                                  .last = last, .micro_batch = B, .seq_len = T,
                                  .in_flight = pipe_schedule(as->schedule, as->stage, as->stages, M, k->ops),
                                  .seed = as->seed, .link = as->stage_link };
    /* the owner's cap, checked before anything is allocated, as the
     * planner counts it (activations besides) */
    uint64_t state = MODEL_STATE_BYTES_PER_PARAM * model_stage_params(&as->model, as->layer_start, as->layer_end,
                                                                      first, last);
    if (k->env->max_memory_bytes > 0 && state > (uint64_t)k->env->max_memory_bytes)
        return err_set(err, 422, "over_memory_cap", NULL, "stage %d (layers " LAYER_RANGE_FMT ") needs %.2f GiB for its weights, "
                       "gradients and AdamW moments alone, more than this agent's --max-memory of %.2f GiB",
                       as->stage, LAYER_RANGE(as->layer_start, as->layer_end), (double)state / (1 << 30),
                       (double)k->env->max_memory_bytes / (1 << 30));
    if (live_stage(k->env->held, &k->env->dev, as, &sp, &k->st, err) != 0)
        return -1;
    k->btc = (size_t)B * T * (size_t)as->model.d_model;
    k->link = codec_get(as->stage_link);
    k->wire_bytes = kern_stage_link_bytes(k->st);
    /* the hidden states in the link's format, or f32 (validation's, the
     * last stage's loss gradient) */
    size_t hidden = k->wire_bytes > k->btc * sizeof(float) ? k->wire_bytes : k->btc * sizeof(float);
    k->x = malloc(hidden);
    k->y = malloc(hidden);
    k->tokens = malloc((size_t)B * T * sizeof(int32_t));
    k->targets = malloc((size_t)B * T * sizeof(int32_t));
    k->loss = calloc((size_t)M, sizeof(double));
    if (!k->x || !k->y || !k->tokens || !k->targets || !k->loss)
        return err_set(err, 500, "internal", NULL, "out of memory for activations");
    if (open_data(k, err) != 0)
        return -1;
    if (!as->live && as->resume_job > 0) {
        if (ckpt_restore(k->env->ctl, k->env->data_dir, k->st, as, err) != 0)
            return -1;
        log_info("resumed job=%lld stage=%d replica=%d from job=%lld step=%lld", (long long)as->job_id, as->stage,
                 as->replica, (long long)as->resume_job, (long long)as->resume_step);
    }
    return 0;
}

/* How many of the tasklet's peer connections are encrypted, of *links. */
static int encrypted_links(const struct tasklet *k, int *links)
{
    const struct peer_conn *ring[4] = { &k->ring_prev, &k->ring_next, &k->tie_prev, &k->tie_next };
    const struct peer_stream *pipe[2] = { k->prev, k->next };
    int n = 0;
    *links = 0;
    for (int i = 0; i < 4; i++) {
        *links += (ring[i]->fd >= 0) + (i < 2 && pipe[i] != NULL);
        n += (ring[i]->fd >= 0 && ring[i]->seal) + (i < 2 && pipe[i] && peer_stream_encrypted(pipe[i]));
    }
    return n;
}

/* A tasklet's stage is kept for a live resume (live.h): an unfinished
 * one's, and a finished one's too, until the job is over (the agent drops
 * it then): a trained job whose final checkpoint's uploader is lost goes
 * on from its survivors at its last step. */
static void tasklet_close(struct tasklet *k, int finished)
{
    (void)finished;
    live_keep(k->env->held, k->as, &k->st);
    peer_stream_stop(k->prev);
    peer_stream_stop(k->next);
    peer_close(&k->ring_prev);
    peer_close(&k->ring_next);
    peer_close(&k->tie_prev);
    peer_close(&k->tie_next);
    free(k->tie_host);
    sync_close(k);
    kern_stage_free(k->st);
    data_close(&k->file);       /* data and a holdout's val are views of it */
    data_close(&k->val_file);
    free(k->ops);
    free(k->x);
    free(k->y);
    free(k->tokens);
    free(k->targets);
    free(k->loss);
    OPENSSL_cleanse(&k->auth, sizeof k->auth);   /* the link keys */
}

enum train_result train_run(const struct train_env *env, const struct assignment *as,
                            struct assign_peer *failed_peer, struct shoal_err *err)
{
    struct tasklet k = { .env = env, .as = as, .ring_prev = { .fd = -1 }, .ring_next = { .fd = -1 },
                         .tie_prev = { .fd = -1 }, .tie_next = { .fd = -1 } };
    enum train_result res = TRAIN_FAILED;
    uint64_t queued[2] = { 0, 0 };   /* bytes queued on prev and next so far */
    k.auth.job_id = as->job_id;
    k.auth.epoch = as->epoch;
    wire_role(as->stage, as->replica, as->node_id, k.auth.role);
    const struct assign_peer *peers[] = { &as->prev_stage, &as->next_stage, &as->ring_prev, &as->ring_next,
                                          &as->tie_peer };
    for (size_t i = 0; i < sizeof peers / sizeof *peers; i++) {
        char role[PEER_ROLE_MAX];
        wire_role(peers[i]->stage, peers[i]->replica, peers[i]->node, role);
        if (peers[i]->addr[0] && peer_auth_link(&k.auth, role, peers[i]->key, sizeof peers[i]->key) != 0) {
            err_set(err, 500, "internal", NULL, "cannot keep the key of the link to '%s'", role);
            goto out;
        }
    }
    k.auth.encrypt = peer_listener_encryption(env->listener); /* --peer-encryption */
    peer_listener_expect(env->listener, &k.auth);
    const char *neighbours[sizeof peers / sizeof *peers];   /* kept handshake slots on our peer port */
    struct shoal_err unresolved;
    for (size_t i = 0; i < sizeof peers / sizeof *peers; i++)
        neighbours[i] = peers[i]->addr;
    if (peer_listener_expect_peers(env->listener, neighbours, (int)(sizeof peers / sizeof *peers), &unresolved) != 0)
        log_warn("tasklet: %s", unresolved.message);
    if (tasklet_open(&k, err) != 0 || connect_neighbours(&k, err) != 0 || sync_open(&k, err) != 0 ||
        live_share(&k, err) != 0)
        goto out;
    int links, encrypted = encrypted_links(&k, &links);
    log_info("tasklet connected job=%lld epoch=%u stage=%d replica=%d layers=" LAYER_RANGE_FMT " stage_link=%s "
             "sync=%s encrypted=%d/%d", (long long)as->job_id, as->epoch, as->stage, as->replica,
             LAYER_RANGE(as->layer_start, as->layer_end), k.link->name, as->sync == ASSIGN_SYNC_DILOCO ? "diloco" : "every_step", encrypted, links);
    for (uint64_t t = (uint64_t)as->resume_step; t < (uint64_t)as->steps; t++) {
        if (tasklet_stopping(&k)) {
            res = TRAIN_ABORTED;
            goto out;
        }
        atomic_store(env->step, (long long)t);
        if (train_step(&k, t, queued, err) != 0)
            goto out;
    }
    /* A live resume at the end (every step trained, the final checkpoint's
     * uploader lost with its part of it): what is left is that checkpoint. */
    if (as->resume_step >= as->steps && as->steps > 0 && checkpoint_due(as, as->steps - 1) &&
        checkpoint_save(&k, as->steps, err) != 0)
        goto out;
    /* The neighbours still read what we queued last. */
    if ((k.prev && peer_stream_flush(k.prev, env->peer_timeout_ms, err) != 0) ||
        (k.next && peer_stream_flush(k.next, env->peer_timeout_ms, err) != 0))
        goto out;
    if (final_checkpoint(&k, err) != 0)
        goto out;
    res = TRAIN_DONE;
out:
    if (res == TRAIN_FAILED && tasklet_stopping(&k))
        res = TRAIN_ABORTED;
    peer_listener_expect(env->listener, NULL);
    (void)peer_listener_expect_peers(env->listener, NULL, 0, err);   /* n 0: cannot fail */
    *failed_peer = k.failed_peer ? *k.failed_peer : (struct assign_peer){ .addr = "" };
    tasklet_close(&k, res == TRAIN_DONE);
    return res;
}
