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

#include "../../common/codec.h"

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

/* How the items of one all-reduce travel: f32 straight from and into the
 * data; bf16 and int8 packed (common/codec.h), int8 in rows of CODEC_BLOCK
 * values with the last row padded with zeros. */
struct ring_wire {
    enum codec_id id;
    const struct codec *c;
    float *feedback;        /* what this rank's packing lost, or NULL */
    float *pad;             /* one item's values, padded to whole rows */
    float *lost;            /* one item's packing error, padded */
    unsigned char *send, *recv;
    unsigned char *store;   /* all-gather items kept to forward, by segment and chunk */
    size_t item_cap;        /* bytes of the largest packed item */
    size_t seg_chunks;      /* chunks of the largest segment */
};

static size_t rows_of(size_t floats)
{
    return (floats + CODEC_BLOCK - 1) / CODEC_BLOCK;
}

/* The header of an item of `floats` values (payload_len included). */
static struct wire_frame item_frame(const struct ring_wire *w, uint64_t step, uint32_t mb, size_t floats)
{
    struct wire_frame f = {.kind = WIRE_ALLREDUCE, .dtype = w->c->dtype, .step = step, .micro_batch = mb,
                           .ndim = 1, .shape = {(uint32_t)floats}};
    if (w->id == CODEC_INT8) {
        f.ndim = 2;
        f.shape[0] = (uint32_t)rows_of(floats);
        f.shape[1] = CODEC_BLOCK;
    }
    f.payload_len = wire_payload_bytes(f.dtype, f.ndim, f.shape, UINT64_MAX / 2);
    return f;
}

/* Packs x[0..floats) into out; what the packing lost goes to feedback[0..floats). */
static void item_pack(const struct ring_wire *w, const float *x, size_t floats, unsigned char *out, float *feedback)
{
    if (w->id != CODEC_INT8) {
        codec_encode(w->id, x, floats, floats, out, feedback);
        return;
    }
    size_t padded = rows_of(floats) * CODEC_BLOCK;
    memcpy(w->pad, x, floats * sizeof *x);
    memset(w->pad + floats, 0, (padded - floats) * sizeof *x);
    memset(w->lost, 0, padded * sizeof *w->lost);
    codec_encode(w->id, w->pad, padded, CODEC_BLOCK, out, w->lost);
    for (size_t i = 0; feedback && i < floats; i++)
        feedback[i] += w->lost[i];
}

/* Unpacks an item into x[0..floats), or adds it there. */
static void item_unpack(const struct ring_wire *w, const unsigned char *in, size_t floats, float *x, int add)
{
    if (w->id != CODEC_INT8) {
        codec_decode(w->id, in, floats, floats, x, add);
        return;
    }
    codec_decode(w->id, in, rows_of(floats) * CODEC_BLOCK, CODEC_BLOCK, w->pad, 0);
    for (size_t i = 0; i < floats; i++)
        x[i] = add ? x[i] + w->pad[i] : w->pad[i];
}

static void wire_free(struct ring_wire *w)
{
    free(w->pad);
    free(w->lost);
    free(w->send);
    free(w->recv);
    free(w->store);
}

static int wire_make(struct ring_wire *w, const struct ring_plan *p, enum codec_id id, float *feedback)
{
    memset(w, 0, sizeof *w);
    w->id = id;
    w->c = codec_get(id);
    w->feedback = feedback;
    if (id == CODEC_F32)
        return 0;
    size_t padded = rows_of(p->chunk) * CODEC_BLOCK;
    struct wire_frame f = item_frame(w, 0, 0, p->chunk);
    w->item_cap = (size_t)f.payload_len;
    w->seg_chunks = chunks_of(p, p->n / (size_t)p->size + 1);
    w->pad = malloc(padded * sizeof *w->pad);
    w->lost = malloc(padded * sizeof *w->lost);
    w->send = malloc(w->item_cap);
    w->recv = malloc(w->item_cap);
    /* only a ring of three or more forwards what it gathers */
    w->store = p->size > 2 ? malloc((size_t)p->size * w->seg_chunks * w->item_cap) : NULL;
    return w->pad && w->lost && w->send && w->recv && (p->size <= 2 || w->store) ? 0 : -1;
}

/* Where the packed chunk `chunk` of segment `seg` is kept for forwarding. */
static unsigned char *stored(const struct ring_wire *w, int seg, size_t chunk)
{
    return w->store + ((size_t)seg * w->seg_chunks + chunk) * w->item_cap;
}

static int check_frame(const struct ring *r, const struct wire_frame *f, const void *payload,
                       const struct wire_frame *want, struct shoal_err *err)
{
    char quoted[160];
    if (f->kind == WIRE_ERROR) {
        peer_quote(payload, (size_t)f->payload_len, quoted, sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "all-reduce step %llu: peer %s (rank %d) reported an error: %s",
                       (unsigned long long)want->step, r->prev->addr,
                       (r->rank - 1 + r->size) % r->size, quoted);
    }
    if (f->kind != WIRE_ALLREDUCE || f->dtype != want->dtype || f->ndim != want->ndim ||
        f->shape[0] != want->shape[0] || f->shape[1] != want->shape[1] || f->step != want->step ||
        f->micro_batch != want->micro_batch || f->payload_len != want->payload_len)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "all-reduce: peer %s sent frame kind %u dtype %u step %llu micro-batch "
                       "%u of %u values; expected an all-reduce chunk of dtype %u for step %llu "
                       "micro-batch %u (round %u chunk %u) of %u values",
                       r->prev->addr, f->kind, f->dtype, (unsigned long long)f->step,
                       f->micro_batch, f->ndim ? f->shape[0] : 0, want->dtype,
                       (unsigned long long)want->step, want->micro_batch,
                       want->micro_batch / RING_CHUNKS_MAX, want->micro_batch % RING_CHUNKS_MAX,
                       want->shape[0]);
    return 0;
}

int ring_allreduce_sum(struct ring *r, float *data, size_t n, uint64_t step, struct shoal_err *err)
{
    return ring_allreduce_codec(r, data, n, step, CODEC_F32, NULL, err);
}

int ring_allreduce_codec(struct ring *r, float *data, size_t n, uint64_t step, enum codec_id codec,
                         float *feedback, struct shoal_err *err)
{
    struct ring_plan p;
    struct ring_wire w = {0};
    struct pos sp = {0}, rp = {0};
    float *scratch = NULL;
    int rc = -1;

    if (r->size < 1 || r->rank < 0 || r->rank >= r->size || r->size > 32767 ||
        (r->size > 1 && (!r->next || !r->prev)) || !codec_get(codec))
        return err_set(err, 500, "peer_io", NULL, "all-reduce: bad ring (rank %d of %d)",
                       r->rank, r->size);
    if (r->size == 1 || n == 0)
        return 0;
    if (plan_make(&p, n, r->rank, r->size, r->chunk_floats) != 0)
        return err_set(err, 500, "peer_io", NULL, "all-reduce: %zu floats is too many", n);
    scratch = malloc(p.chunk * sizeof *scratch);
    if (!scratch || wire_make(&w, &p, codec, feedback) != 0) {
        err_set(err, 500, "peer_io", NULL, "all-reduce: out of memory");
        goto out;
    }
    for (size_t i = 0; feedback && i < n; i++) {   /* what earlier sums lost goes in again */
        data[i] += feedback[i];
        feedback[i] = 0;
    }
    int gather = p.size - 1;   /* the first all-gather round */
    pos_settle(&p, &sp, 0);
    pos_settle(&p, &rp, 1);
    while (sp.round < p.rounds || rp.round < p.rounds) {
        /* Send item (round, chunk) needs chunk `chunk` of round-1 received. */
        int send_ready = sp.round < p.rounds &&
                         (sp.round == 0 || rp.round > sp.round - 1 ||
                          (rp.round == sp.round - 1 && rp.chunk > sp.chunk));
        int recv_ready = rp.round < p.rounds;
        struct wire_frame sf = {0}, rf, want = {0};
        size_t soff = 0, roff = 0, sn = 0, rn = 0, rcap = 0;
        const void *spay = NULL;
        void *dst = NULL;
        if (send_ready) {
            sn = item_span(&p, &sp, 0, &soff);
            sf = item_frame(&w, step, (uint32_t)sp.round * RING_CHUNKS_MAX + (uint32_t)sp.chunk, sn);
            spay = data + soff;
            if (codec != CODEC_F32 && sp.round <= gather) {
                /* our own partial sum, or (all-gather's first round) the
                 * finished sum we own: packed once, and the owner keeps
                 * exactly what the others will get */
                item_pack(&w, data + soff, sn, w.send, feedback ? feedback + soff : NULL);
                if (sp.round == gather)
                    item_unpack(&w, w.send, sn, data + soff, 0);
                spay = w.send;
            } else if (codec != CODEC_F32) {
                spay = stored(&w, seg_of(&p, sp.round, 0), sp.chunk);   /* forwarded as received */
            }
        }
        if (recv_ready) {
            rn = item_span(&p, &rp, 1, &roff);
            want = item_frame(&w, step, (uint32_t)rp.round * RING_CHUNKS_MAX + (uint32_t)rp.chunk, rn);
            rcap = (size_t)want.payload_len;
            if (codec == CODEC_F32)
                dst = rp.round < gather ? (void *)scratch : (void *)(data + roff);
            else if (rp.round >= gather && rp.round + 1 < p.rounds)
                dst = stored(&w, seg_of(&p, rp.round, 1), rp.chunk);   /* to forward next round */
            else
                dst = w.recv;
        }
        if (peer_sendrecv_stop(r->next, send_ready ? &sf : NULL, spay, r->prev, recv_ready ? &rf : NULL, dst, rcap,
                               r->timeout_ms, &r->stop, err) != 0)
            goto out;
        if (send_ready)
            pos_next(&p, &sp, 0);
        if (recv_ready) {
            if (check_frame(r, &rf, dst, &want, err) != 0)
                goto out;
            if (codec != CODEC_F32) {
                item_unpack(&w, dst, rn, data + roff, rp.round < gather);
            } else if (rp.round < gather) {
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
    wire_free(&w);
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
