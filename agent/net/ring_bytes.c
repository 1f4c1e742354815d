/* ring_bytes.c - small byte messages round the ring (ring.h): one rank's
 * bytes to every rank (a live resume's stage file), and each rank's step
 * loss to the next rank.
 *
 * A broadcast's item 0 is the length, items 1..n the chunks.  A rank that
 * is not the root receives item 0 and then, while it forwards item i to the
 * next rank (unless the next rank is the root), receives item i+1
 * (peer_sendrecv), so the chunks flow down the chain like a pipeline: the
 * whole broadcast takes about one transfer of the bytes plus one chunk per
 * hop. */
#include "ring.h"

#include "peer_internal.h"

#include <stdlib.h>
#include <string.h>

/* A WIRE_BYTES frame of `kind`: item i of step `step`, `bytes` long. */
static struct wire_frame item(uint16_t kind, uint64_t step, uint32_t i, size_t bytes)
{
    return (struct wire_frame){ .kind = kind, .dtype = WIRE_BYTES, .step = step, .micro_batch = i,
                                .payload_len = bytes };
}

static void le64_put(unsigned char out[8], uint64_t v)
{
    for (int b = 0; b < 8; b++)
        out[b] = (unsigned char)(v >> (8 * b));
}

static uint64_t le64_get(const unsigned char in[8])
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | in[b];
    return v;
}

/* Bytes [*off, *off + return) of the data that item i >= 1 carries. */
static size_t item_span(size_t len, uint32_t i, size_t *off)
{
    *off = (size_t)(i - 1) * RING_STATE_CHUNK_BYTES;
    return len - *off < RING_STATE_CHUNK_BYTES ? len - *off : RING_STATE_CHUNK_BYTES;
}

/* 0 when frame f (payload at most its buffer's) from the previous rank is
 * `want`, else -1 with err set: the peer's own error, or what came instead
 * of the `what` ("state", "loss") expected. */
static int check_item(const struct ring *r, const struct wire_frame *f, const void *payload, size_t cap,
                      const struct wire_frame *want, const char *what, struct shoal_err *err)
{
    char quoted[160];
    if (f->kind == WIRE_ERROR) {
        peer_quote(payload, (size_t)f->payload_len < cap ? (size_t)f->payload_len : cap, quoted, sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_protocol", NULL, "%s from peer %s: it reported an error: %s", what,
                       r->prev->addr, quoted);
    }
    if (f->kind != want->kind || f->dtype != want->dtype || f->step != want->step ||
        f->micro_batch != want->micro_batch || f->payload_len != want->payload_len)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "%s from peer %s: frame kind %u step %llu item %u of %llu bytes; expected the %s of step "
                       "%llu (item %u, %llu bytes)", what, r->prev->addr, f->kind, (unsigned long long)f->step,
                       f->micro_batch, (unsigned long long)f->payload_len, what,
                       (unsigned long long)want->step, want->micro_batch, (unsigned long long)want->payload_len);
    return 0;
}

int ring_broadcast(struct ring *r, int root, unsigned char **data, size_t *len, size_t len_max, uint64_t step,
                   struct shoal_err *err)
{
    unsigned char head[8], *buf = NULL;
    int is_root = r->rank == root, forward = (r->rank + 1) % r->size != root;
    uint64_t total = 0;
    if (r->size < 1 || r->rank < 0 || r->rank >= r->size || root < 0 || root >= r->size ||
        (r->size > 1 && (!r->next || !r->prev)))
        return err_set(err, 500, "peer_io", NULL, "state broadcast: bad ring (rank %d of %d, root %d)", r->rank,
                       r->size, root);
    if (r->size == 1)
        return 0;
    if (is_root) {
        total = *len;
        buf = *data;
    } else {
        struct wire_frame rf, want = item(WIRE_STATE, step, 0, sizeof head);
        if (peer_sendrecv_stop(NULL, NULL, NULL, r->prev, &rf, head, sizeof head, r->timeout_ms, &r->stop,
                               err) != 0 || check_item(r, &rf, head, sizeof head, &want, "state", err) != 0)
            return -1;
        total = le64_get(head);
        if (total == 0 || total > len_max)
            return err_set(err, PEER_STATUS, "peer_protocol", NULL, "state from peer %s: %llu bytes, expected 1 "
                           "to %zu", r->prev->addr, (unsigned long long)total, len_max);
        if (!(buf = malloc((size_t)total)))
            return err_set(err, 500, "internal", NULL, "out of memory for %llu bytes of state",
                           (unsigned long long)total);
    }
    le64_put(head, total);
    uint32_t n = (uint32_t)((total + RING_STATE_CHUNK_BYTES - 1) / RING_STATE_CHUNK_BYTES);
    /* Step i: send item i (root: always; others: when the next rank is not
     * the root) while receiving item i+1 (not the root). */
    for (uint32_t i = 0; i <= n; i++) {
        size_t soff = 0, roff = 0, sn = i ? item_span((size_t)total, i, &soff) : sizeof head, rn = 0;
        int send = is_root || forward, recv = !is_root && i < n;
        struct wire_frame sf = item(WIRE_STATE, step, i, sn), rf, want = { 0 };
        if (recv) {
            rn = item_span((size_t)total, i + 1, &roff);
            want = item(WIRE_STATE, step, i + 1, rn);
        }
        if ((send || recv) &&
            peer_sendrecv_stop(r->next, send ? &sf : NULL, i ? (const void *)(buf + soff) : head, r->prev,
                               recv ? &rf : NULL, buf + roff, rn, r->timeout_ms, &r->stop, err) != 0)
            goto fail;
        if (recv && check_item(r, &rf, buf + roff, rn, &want, "state", err) != 0)
            goto fail;
    }
    if (!is_root) {
        *data = buf;
        *len = (size_t)total;
    }
    return 0;
fail:
    if (!is_root)
        free(buf);
    return -1;
}

int ring_pass_loss(struct ring *r, double mine, double *from_prev, uint64_t step, struct shoal_err *err)
{
    unsigned char out[8], in[8];
    uint64_t bits;
    if (r->size < 2 || !r->next || !r->prev)
        return err_set(err, 500, "peer_io", NULL, "loss pass: bad ring (rank %d of %d)", r->rank, r->size);
    memcpy(&bits, &mine, sizeof bits);
    le64_put(out, bits);
    struct wire_frame sf = item(WIRE_LOSS, step, 0, sizeof out), rf, want = sf;
    if (peer_sendrecv_stop(r->next, &sf, out, r->prev, &rf, in, sizeof in, r->timeout_ms, &r->stop, err) != 0 ||
        check_item(r, &rf, in, sizeof in, &want, "loss", err) != 0)
        return -1;
    bits = le64_get(in);
    memcpy(from_prev, &bits, sizeof bits);
    return 0;
}
