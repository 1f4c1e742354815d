/* ring.c - chunked ring all-reduce over peer connections (see ring.h).
 *
 * Rounds 0..size-2 reduce-scatter: rank k sends segment k-r and adds the
 * received segment k-r-1 into its own, so segment s is summed in the fixed
 * order x_s + x_{s+1} + ... around the ring and is complete on rank s-1.
 * Rounds size-1..2(size-1)-1 all-gather: rank k sends segment k+1-q and
 * receives segment k-q straight into data (copied, never re-added), so all
 * ranks end with the same bits.
 *
 * The 2(size-1) rounds run as one pipeline: the send of chunk j of round r
 * needs only chunk j of round r-1 received (it is the same segment), so a
 * rank never waits at a round boundary for a whole segment. */
#include "ring.h"

#include "peer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_CHUNKS_MAX 65536u               /* micro_batch = round * 65536 + chunk */
#define RING_CHUNK_FLOATS_MAX (256u << 20)   /* 1 GiB per frame */

struct ring_plan {
    size_t n, chunk;
    int rank, size, rounds;
};

/* First float of segment s: floor(n * s / size) without overflow. */
static size_t seg_off(size_t n, int size, int s)
{
    size_t p = (size_t)size;
    return n / p * (size_t)s + n % p * (size_t)s / p;
}

static int seg_mod(int s, int size)
{
    return ((s % size) + size) % size;
}

/* Segment rank k sends (dir 0) or receives (dir 1) in round r. */
static int seg_of(const struct ring_plan *p, int r, int dir)
{
    int k = p->rank;
    if (r < p->size - 1)
        return seg_mod(k - r - dir, p->size);
    return seg_mod(k + 1 - (r - (p->size - 1)) - dir, p->size);
}

static size_t seg_len(const struct ring_plan *p, int s)
{
    return seg_off(p->n, p->size, s + 1) - seg_off(p->n, p->size, s);
}

static size_t chunks_of(const struct ring_plan *p, size_t floats)
{
    return (floats + p->chunk - 1) / p->chunk;
}

/* Chunks no larger than asked, but few enough to number within a round. */
static int plan_make(struct ring_plan *p, size_t n, int rank, int size, size_t chunk_floats)
{
    p->n = n;
    p->rank = rank;
    p->size = size;
    p->rounds = 2 * (size - 1);
    p->chunk = chunk_floats ? chunk_floats : RING_DEFAULT_CHUNK_FLOATS;
    size_t seg_max = n / (size_t)size + (n % (size_t)size != 0);
    if ((seg_max + p->chunk - 1) / p->chunk > RING_CHUNKS_MAX)
        p->chunk = (seg_max + RING_CHUNKS_MAX - 1) / RING_CHUNKS_MAX;
    return p->chunk > RING_CHUNK_FLOATS_MAX ? -1 : 0;
}

/* Position in the flattened sequence of (round, chunk) items of one
 * direction; empty rounds are skipped. */
struct pos {
    int round;
    size_t chunk, count; /* count: chunks in this round */
};

static void pos_settle(const struct ring_plan *p, struct pos *q, int dir)
{
    while (q->round < p->rounds) {
        q->count = chunks_of(p, seg_len(p, seg_of(p, q->round, dir)));
        if (q->chunk < q->count)
            return;
        q->round++;
        q->chunk = 0;
    }
}

static void pos_next(const struct ring_plan *p, struct pos *q, int dir)
{
    q->chunk++;
    pos_settle(p, q, dir);
}

/* Floats [*off, *off + return) of data that item q covers. */
static size_t item_span(const struct ring_plan *p, const struct pos *q, int dir, size_t *off)
{
    int s = seg_of(p, q->round, dir);
    size_t len = seg_len(p, s), first = q->chunk * p->chunk;
    *off = seg_off(p->n, p->size, s) + first;
    return len - first < p->chunk ? len - first : p->chunk;
}

static int check_frame(const struct ring *r, const struct wire_frame *f, const void *payload,
                       uint64_t step, uint32_t mb, size_t floats, struct shoal_err *err)
{
    char quoted[160];
    if (f->kind == WIRE_ERROR) {
        peer_quote(payload, (size_t)f->payload_len, quoted, sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "all-reduce step %llu: peer %s (rank %d) reported an error: %s",
                       (unsigned long long)step, r->prev->addr,
                       (r->rank - 1 + r->size) % r->size, quoted);
    }
    if (f->kind != WIRE_ALLREDUCE || f->dtype != WIRE_F32 || f->ndim != 1 ||
        f->shape[0] != floats || f->step != step || f->micro_batch != mb)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "all-reduce: peer %s sent frame kind %u dtype %u step %llu micro-batch "
                       "%u of %u floats; expected an all-reduce chunk for step %llu micro-batch "
                       "%u (round %u chunk %u) of %zu floats",
                       r->prev->addr, f->kind, f->dtype, (unsigned long long)f->step,
                       f->micro_batch, f->ndim ? f->shape[0] : 0, (unsigned long long)step,
                       mb, mb / RING_CHUNKS_MAX, mb % RING_CHUNKS_MAX, floats);
    return 0;
}

int ring_allreduce_sum(struct ring *r, float *data, size_t n, uint64_t step, struct shoal_err *err)
{
    struct ring_plan p;
    struct pos sp = {0}, rp = {0};
    float *scratch = NULL;
    int rc = -1;

    if (r->size < 1 || r->rank < 0 || r->rank >= r->size || r->size > 32767 ||
        (r->size > 1 && (!r->next || !r->prev)))
        return err_set(err, 500, "peer_io", NULL, "all-reduce: bad ring (rank %d of %d)",
                       r->rank, r->size);
    if (r->size == 1 || n == 0)
        return 0;
    if (plan_make(&p, n, r->rank, r->size, r->chunk_floats) != 0)
        return err_set(err, 500, "peer_io", NULL, "all-reduce: %zu floats is too many", n);
    scratch = malloc(p.chunk * sizeof *scratch);
    if (!scratch) {
        err_set(err, 500, "peer_io", NULL, "all-reduce: out of memory");
        goto out;
    }
    pos_settle(&p, &sp, 0);
    pos_settle(&p, &rp, 1);
    while (sp.round < p.rounds || rp.round < p.rounds) {
        /* Send item (round, chunk) needs chunk `chunk` of round-1 received. */
        int send_ready = sp.round < p.rounds &&
                         (sp.round == 0 || rp.round > sp.round - 1 ||
                          (rp.round == sp.round - 1 && rp.chunk > sp.chunk));
        int recv_ready = rp.round < p.rounds;
        struct wire_frame sf = {0}, rf;
        size_t soff = 0, roff = 0, sn = 0, rn = 0;
        uint32_t smb = 0, rmb = 0;
        float *dst = NULL;
        if (send_ready) {
            sn = item_span(&p, &sp, 0, &soff);
            smb = (uint32_t)sp.round * RING_CHUNKS_MAX + (uint32_t)sp.chunk;
            sf = (struct wire_frame){.kind = WIRE_ALLREDUCE, .dtype = WIRE_F32, .step = step,
                                     .micro_batch = smb, .ndim = 1, .shape = {(uint32_t)sn},
                                     .payload_len = sn * sizeof(float)};
        }
        if (recv_ready) {
            rn = item_span(&p, &rp, 1, &roff);
            rmb = (uint32_t)rp.round * RING_CHUNKS_MAX + (uint32_t)rp.chunk;
            dst = rp.round < p.size - 1 ? scratch : data + roff;
        }
        if (peer_sendrecv(r->next, send_ready ? &sf : NULL, data + soff, r->prev,
                          recv_ready ? &rf : NULL, dst, rn * sizeof(float), r->timeout_ms,
                          err) != 0)
            goto out;
        if (send_ready)
            pos_next(&p, &sp, 0);
        if (recv_ready) {
            if (check_frame(r, &rf, dst, step, rmb, rn, err) != 0)
                goto out;
            if (rp.round < p.size - 1) {
                float *acc = data + roff;
                for (size_t i = 0; i < rn; i++)
                    acc[i] += scratch[i];
            }
            pos_next(&p, &rp, 1);
        }
    }
    rc = 0;
out:
    free(scratch);
    return rc;
}

uint64_t ring_bytes_per_rank(size_t n, int size, size_t chunk_floats)
{
    struct ring_plan p;
    uint64_t bytes = 0;
    if (size <= 1 || n == 0 || plan_make(&p, n, 0, size, chunk_floats) != 0)
        return 0;
    /* Exact for rank 0; other ranks differ by the odd float per segment. */
    for (int r = 0; r < p.rounds; r++) {
        size_t len = seg_len(&p, seg_of(&p, r, 0));
        bytes += (uint64_t)len * sizeof(float) + (uint64_t)chunks_of(&p, len) * WIRE_HEADER_BYTES;
    }
    return bytes;
}
