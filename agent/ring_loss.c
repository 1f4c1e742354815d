/* ring_loss.c - each rank's step loss to the next rank of the ring (ring.h). */
#include "ring.h"

#include "peer_internal.h"

#include <string.h>

static struct wire_frame loss_frame(uint64_t step)
{
    return (struct wire_frame){ .kind = WIRE_LOSS, .dtype = WIRE_BYTES, .step = step, .micro_batch = 0,
                                .payload_len = 8 };
}

int ring_pass_loss(struct ring *r, double mine, double *from_prev, uint64_t step, struct shoal_err *err)
{
    unsigned char out[8], in[8];
    uint64_t bits;
    char quoted[160];
    if (r->size < 2 || !r->next || !r->prev)
        return err_set(err, 500, "peer_io", NULL, "loss pass: bad ring (rank %d of %d)", r->rank, r->size);
    memcpy(&bits, &mine, sizeof bits);
    for (int b = 0; b < 8; b++)
        out[b] = (unsigned char)(bits >> (8 * b));
    struct wire_frame sf = loss_frame(step), rf, want = loss_frame(step);
    if (peer_sendrecv_stop(r->next, &sf, out, r->prev, &rf, in, sizeof in, r->timeout_ms, &r->stop, err) != 0)
        return -1;
    if (rf.kind == WIRE_ERROR) {
        peer_quote(in, (size_t)rf.payload_len < sizeof in ? (size_t)rf.payload_len : sizeof in, quoted,
                   sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_protocol", NULL, "loss from peer %s: it reported an error: %s",
                       r->prev->addr, quoted);
    }
    if (rf.kind != want.kind || rf.dtype != want.dtype || rf.step != want.step || rf.micro_batch != 0 ||
        rf.payload_len != want.payload_len)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL, "loss from peer %s: frame kind %u step %llu of "
                       "%llu bytes; expected the loss of step %llu", r->prev->addr, rf.kind,
                       (unsigned long long)rf.step, (unsigned long long)rf.payload_len,
                       (unsigned long long)step);
    bits = 0;
    for (int b = 7; b >= 0; b--)
        bits = bits << 8 | in[b];
    memcpy(from_prev, &bits, sizeof bits);
    return 0;
}
