/* tasklet.c - what every part of a tasklet's loop uses to talk to its
 * neighbours (tasklet.h). */
#include "tasklet.h"

#include <stdio.h>
#include <string.h>

/* Waits on a neighbour last at most --peer-timeout in all, in slices of
 * this many ms, so that a changed assignment (the job is recovering) stops
 * the tasklet within a slice instead of at the timeout. */
#define TASKLET_WAIT_SLICE_MS PEER_STOP_SLICE_MS

double tasklet_loss_mean(const struct tasklet *k)
{
    double sum = 0;
    for (int m = 0; m < k->as->micro_batches; m++)
        sum += k->loss[m];
    return sum / k->as->micro_batches;
}

int tasklet_peer_failed(struct tasklet *k, const struct assign_peer *peer)
{
    if (!k->failed_peer)
        k->failed_peer = peer;
    return -1;
}

/* The neighbour at the other end of pipeline stream s. */
static const struct assign_peer *stream_peer(const struct tasklet *k, const struct peer_stream *s)
{
    return s == k->prev ? &k->as->prev_stage : &k->as->next_stage;
}

int tasklet_kern_failed(const struct kern_err *ke, struct shoal_err *err)
{
    return err_set(err, 500, "device_error", NULL, "%s", ke->msg);
}

int tasklet_stopping(const struct tasklet *k)
{
    return atomic_load(k->env->abort) || (k->env->ctl->stop && atomic_load(k->env->ctl->stop));
}

static int stop_hook(void *k)
{
    return tasklet_stopping(k);
}

struct peer_stop tasklet_peer_stop(struct tasklet *k)
{
    return (struct peer_stop){ stop_hook, k };
}

struct ring tasklet_ring(struct tasklet *k)
{
    return (struct ring){ .next = &k->ring_next, .prev = &k->ring_prev, .rank = k->as->replica,
                          .size = k->as->replicas, .timeout_ms = k->env->peer_timeout_ms,
                          .stop = tasklet_peer_stop(k) };
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
    if (tasklet_stopping(k))
        return err_set(err, 503, "aborted", NULL, "the assignment changed or the agent is stopping while waiting "
                       "on a neighbour");
    return 0;
}

/* peer_stream_recv of the frame (kind, dtype, t, m) into payload, within
 * the peer timeout (see TASKLET_WAIT_SLICE_MS). */
static int stream_recv(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint16_t dtype, uint64_t t,
                       uint32_t m, void *payload, size_t len, struct shoal_err *err)
{
    for (int left = k->env->peer_timeout_ms;;) {
        int slice = left < TASKLET_WAIT_SLICE_MS ? left : TASKLET_WAIT_SLICE_MS;
        if (peer_stream_recv(s, kind, dtype, t, m, payload, len, slice, err) == 0)
            return 0;
        if (wait_more(k, s, &left, slice, err) != 0)
            return tasklet_peer_failed(k, stream_peer(k, s));
    }
}

/* peer_stream_send within the peer timeout (see TASKLET_WAIT_SLICE_MS). */
static int stream_send(struct tasklet *k, struct peer_stream *s, const struct wire_frame *f, const void *payload,
                       struct shoal_err *err)
{
    for (int left = k->env->peer_timeout_ms;;) {
        int slice = left < TASKLET_WAIT_SLICE_MS ? left : TASKLET_WAIT_SLICE_MS;
        if (peer_stream_send(s, f, payload, slice, err) == 0)
            return 0;
        if (wait_more(k, s, &left, slice, err) != 0)
            return tasklet_peer_failed(k, stream_peer(k, s));
    }
}

/* The header of a (B,T,C) frame in the stage link's codec. */
static struct wire_frame tensor_frame(const struct tasklet *k, uint16_t kind, uint64_t t, int m)
{
    const struct kern_stage_spec *sp = kern_stage_spec(k->st);
    return (struct wire_frame){ .kind = kind, .dtype = k->link->dtype, .job_id = k->as->job_id,
                                .epoch = k->as->epoch, .micro_batch = (uint32_t)m, .step = t, .ndim = 3,
                                .shape = { (uint32_t)sp->micro_batch, (uint32_t)sp->seq_len,
                                           (uint32_t)k->as->model.d_model },
                                .payload_len = k->wire_bytes };
}

int tasklet_send_tensor(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m,
                        const void *x, struct shoal_err *err)
{
    struct wire_frame f = tensor_frame(k, kind, t, m);
    return stream_send(k, s, &f, x, err);
}

int tasklet_recv_tensor(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m, void *x,
                        struct shoal_err *err)
{
    return stream_recv(k, s, kind, k->link->dtype, t, (uint32_t)m, x, k->wire_bytes, err);
}

int tasklet_send_bytes(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m,
                       const void *payload, size_t len, struct shoal_err *err)
{
    struct wire_frame f = { .kind = kind, .dtype = WIRE_BYTES, .job_id = k->as->job_id, .epoch = k->as->epoch,
                            .micro_batch = (uint32_t)m, .step = t, .payload_len = len };
    return stream_send(k, s, &f, payload, err);
}

int tasklet_recv_bytes(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m, void *payload,
                       size_t len, struct shoal_err *err)
{
    return stream_recv(k, s, kind, WIRE_BYTES, t, (uint32_t)m, payload, len, err);
}
