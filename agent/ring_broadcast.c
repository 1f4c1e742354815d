/* ring_broadcast.c - one rank's bytes to every rank of the ring (ring.h).
 *
 * Item 0 is the length, items 1..n the chunks.  A rank that is not the
 * root receives item 0 and then, while it forwards item i to the next rank
 * (unless the next rank is the root), receives item i+1 (peer_sendrecv), so
 * the chunks flow down the chain like a pipeline: the whole broadcast takes
 * about one transfer of the bytes plus one chunk per hop. */
#include "ring.h"

#include "peer_internal.h"

#include <stdlib.h>
#include <string.h>

static struct wire_frame item(uint64_t step, uint32_t i, size_t bytes)
{
    return (struct wire_frame){ .kind = WIRE_STATE, .dtype = WIRE_BYTES, .step = step, .micro_batch = i,
                                .payload_len = bytes };
}

/* Bytes [*off, *off + return) of the data that item i >= 1 carries. */
static size_t item_span(size_t len, uint32_t i, size_t *off)
{
    *off = (size_t)(i - 1) * RING_STATE_CHUNK_BYTES;
    return len - *off < RING_STATE_CHUNK_BYTES ? len - *off : RING_STATE_CHUNK_BYTES;
}

static int check_item(const struct ring *r, const struct wire_frame *f, const void *payload,
                      const struct wire_frame *want, struct shoal_err *err)
{
    char quoted[160];
    if (f->kind == WIRE_ERROR) {
        peer_quote(payload, (size_t)f->payload_len, quoted, sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_protocol", NULL, "state from peer %s: it reported an error: %s",
                       r->prev->addr, quoted);
    }
    if (f->kind != want->kind || f->dtype != want->dtype || f->step != want->step ||
        f->micro_batch != want->micro_batch || f->payload_len != want->payload_len)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "state from peer %s: frame kind %u step %llu item %u of %llu bytes; expected a state "
                       "item %u for step %llu of %llu bytes", r->prev->addr, f->kind,
                       (unsigned long long)f->step, f->micro_batch, (unsigned long long)f->payload_len,
                       want->micro_batch, (unsigned long long)want->step,
                       (unsigned long long)want->payload_len);
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
        struct wire_frame rf, want = item(step, 0, sizeof head);
        if (peer_sendrecv_stop(NULL, NULL, NULL, r->prev, &rf, head, sizeof head, r->timeout_ms, &r->stop,
                               err) != 0 || check_item(r, &rf, head, &want, err) != 0)
            return -1;
        for (int b = 7; b >= 0; b--)
            total = total << 8 | head[b];
        if (total == 0 || total > len_max)
            return err_set(err, PEER_STATUS, "peer_protocol", NULL, "state from peer %s: %llu bytes, expected 1 "
                           "to %zu", r->prev->addr, (unsigned long long)total, len_max);
        if (!(buf = malloc((size_t)total)))
            return err_set(err, 500, "internal", NULL, "out of memory for %llu bytes of state",
                           (unsigned long long)total);
    }
    for (int b = 0; b < 8; b++)
        head[b] = (unsigned char)(total >> (8 * b));
    uint32_t n = (uint32_t)((total + RING_STATE_CHUNK_BYTES - 1) / RING_STATE_CHUNK_BYTES);
    /* Step i: send item i (root: always; others: when the next rank is not
     * the root) while receiving item i+1 (not the root). */
    for (uint32_t i = 0; i <= n; i++) {
        size_t soff = 0, roff = 0, sn = i ? item_span((size_t)total, i, &soff) : sizeof head, rn = 0;
        int send = is_root || forward, recv = !is_root && i < n;
        struct wire_frame sf = item(step, i, sn), rf, want = { 0 };
        if (recv) {
            rn = item_span((size_t)total, i + 1, &roff);
            want = item(step, i + 1, rn);
        }
        if ((send || recv) &&
            peer_sendrecv_stop(r->next, send ? &sf : NULL, i ? (const void *)(buf + soff) : head, r->prev,
                               recv ? &rf : NULL, buf + roff, rn, r->timeout_ms, &r->stop, err) != 0)
            goto fail;
        if (recv && check_item(r, &rf, buf + roff, &want, err) != 0)
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
