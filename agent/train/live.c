/* live.c - a stage kept across epochs for a live resume (live.h). */
#include "live.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "tasklet.h"

void live_init(struct live_held *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
}

void live_drop(struct live_held *h)
{
    pthread_mutex_lock(&h->mu);
    struct kern_stage *st = h->st;
    h->st = NULL;
    h->job = 0;
    pthread_mutex_unlock(&h->mu);
    kern_stage_free(st);
}

void live_destroy(struct live_held *h)
{
    live_drop(h);
    pthread_mutex_destroy(&h->mu);
}

void live_keep(struct live_held *h, const struct assignment *as, struct kern_stage **st)
{
    if (!*st || as->sync != ASSIGN_SYNC_EVERY_STEP)
        return;
    kern_stage_drop_in_flight(*st);
    live_drop(h);
    pthread_mutex_lock(&h->mu);
    h->st = *st;
    h->job = as->job_id;
    h->layer_start = as->layer_start;
    h->layer_end = as->layer_end;
    h->step = kern_stage_step(*st);
    pthread_mutex_unlock(&h->mu);
    *st = NULL;
    log_info("holding job=%lld layers=" LAYER_RANGE_FMT " at step=%llu for a live resume",
             (long long)as->job_id, LAYER_RANGE(as->layer_start, as->layer_end), (unsigned long long)h->step);
}

json_t *live_held_json(struct live_held *h)
{
    json_t *out = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->st)
        out = json_pack("{s:I, s:i, s:i, s:I}", "job_id", (json_int_t)h->job, "layer_start", h->layer_start,
                        "layer_end", h->layer_end, "step", (json_int_t)h->step);
    pthread_mutex_unlock(&h->mu);
    return out;
}

/* 1 when stages built from a and b are interchangeable. */
static int same_shape(const struct kern_stage_spec *a, const struct kern_stage_spec *b)
{
    return a->layer_start == b->layer_start && a->layer_end == b->layer_end && a->first == b->first &&
           a->last == b->last && a->micro_batch == b->micro_batch && a->seq_len == b->seq_len &&
           a->in_flight == b->in_flight && a->link == b->link;
}

int live_stage(struct live_held *h, const struct kern_device *dev, const struct assignment *as,
               const struct kern_stage_spec *sp, struct kern_stage **out, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    int own = as->live && (as->live_root < 0 || as->live_root == as->replica);
    *out = NULL;
    if (!own)
        live_drop(h);   /* its memory first: the new stage may need it */
    else if (!h->st || h->job != as->job_id || h->layer_start != as->layer_start || h->layer_end != as->layer_end ||
        h->step != (uint64_t)as->resume_step) {
        if (h->st)
            err_set(err, 409, "live_state_gone", NULL, "the plan resumes stage %d (layers " LAYER_RANGE_FMT ") of job "
                    "%lld at step %lld from this agent's memory, which holds job %lld layers " LAYER_RANGE_FMT
                    " at step %llu", as->stage, LAYER_RANGE(as->layer_start, as->layer_end), (long long)as->job_id,
                    (long long)as->resume_step, (long long)h->job, LAYER_RANGE(h->layer_start, h->layer_end),
                    (unsigned long long)h->step);
        else
            err_set(err, 409, "live_state_gone", NULL, "the plan resumes stage %d of job %lld at step %lld from "
                    "this agent's memory, which holds no stage (the agent restarted?)", as->stage,
                    (long long)as->job_id, (long long)as->resume_step);
        live_drop(h);
        return -1;
    } else if (same_shape(kern_stage_spec(h->st), sp)) {
        pthread_mutex_lock(&h->mu);
        *out = h->st;
        h->st = NULL;
        pthread_mutex_unlock(&h->mu);
        return 0;
    }
    if (kern_stage_new(dev, &as->model, sp, out, &ke) != 0)
        return tasklet_kern_failed(&ke, err);
    if (own) {   /* the same tensors in a stage of another shape (micro-batches, schedule) */
        int rc = kern_stage_assemble(*out, &h->st, 1, &ke);
        live_drop(h);
        if (rc != 0) {
            kern_stage_free(*out);
            *out = NULL;
            return tasklet_kern_failed(&ke, err);
        }
    }
    return 0;
}

/* The stage file of st in memory: *data (malloc'd) of *len bytes. */
static int stage_bytes(struct kern_stage *st, unsigned char **data, size_t *len, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return err_set(err, 500, "internal", NULL, "out of memory for the stage's state");
    int saved = kern_stage_save(st, f, &ke);
    if (fclose(f) != 0 || saved != 0) {
        free(buf);
        return saved != 0 ? tasklet_kern_failed(&ke, err) : err_set(err, 500, "internal", NULL, "out of memory "
                                                                    "for the stage's state");
    }
    *data = (unsigned char *)buf;
    *len = n;
    return 0;
}

/* The root's stage file, *data[0..*len), to the stage's other replicas
 * (ring.h's ring_broadcast contract): by the group's NCCL communicator
 * when it syncs over NCCL, else round the TCP ring. */
static int broadcast_state(struct tasklet *k, unsigned char **data, size_t *len, size_t len_max,
                           struct shoal_err *err)
{
    const struct assignment *as = k->as;
    if (k->nccl)   /* which peer failed NCCL does not say: the report names none */
        return nccl_broadcast_bytes(k->nccl, as->live_root, data, len, len_max, k->env->peer_timeout_ms / 1e3,
                                    err);
    struct ring r = tasklet_ring(k);
    if (ring_broadcast(&r, as->live_root, data, len, len_max, (uint64_t)as->resume_step, err) != 0)
        return tasklet_peer_failed(k, &as->ring_prev);
    return 0;
}

int live_share(struct tasklet *k, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = -1;
    if (!as->live || as->live_root < 0 || as->replicas == 1)
        return 0;
    double t0 = ctl_now();
    int root = as->live_root == as->replica;
    /* a stage file: a header, the parameters, both moments and any extras */
    size_t len_max = kern_stage_param_count(k->st) * sizeof(float) * (3 + KERN_EXTRA_COUNT) + (1u << 20);
    if (root && stage_bytes(k->st, &data, &len, err) != 0)
        return -1;
    if (broadcast_state(k, &data, &len, len_max, err) != 0)
        goto out;
    if (!root) {
        FILE *f = fmemopen(data, len, "rb");
        int loaded = f ? kern_stage_load(k->st, f, &ke) : -1;
        if (f)
            fclose(f);
        if (loaded != 0) {
            err_set(err, 502, "live_state_bad", NULL, "the state of stage %d from replica %d does not load: %s",
                    as->stage, as->live_root, f ? ke.msg : "out of memory");
            goto out;
        }
        if (kern_stage_step(k->st) != (uint64_t)as->resume_step) {
            err_set(err, 502, "live_state_bad", NULL, "replica %d sent stage %d at step %llu; the plan resumes "
                    "at step %lld", as->live_root, as->stage, (unsigned long long)kern_stage_step(k->st),
                    (long long)as->resume_step);
            goto out;
        }
    }
    log_info("live resume job=%lld stage=%d replica=%d step=%lld: state %s replica %d, %zu bytes in %.3f s",
             (long long)as->job_id, as->stage, as->replica, (long long)as->resume_step, root ? "sent by this" :
             "received from", as->live_root, len, ctl_now() - t0);
    rc = 0;
out:
    free(data);
    return rc;
}
