/* ring.h - the data-parallel all-reduce on CPU nodes: a chunked, pipelined
 * ring over TCP (reduce-scatter then all-gather, Patarasuk & Yuan 2009).
 *
 * Rank k sends to rank k+1 on `next` and receives from rank k-1 on `prev`
 * (both connections of the same job and epoch).  The buffer is cut into
 * `size` segments; in each of the 2(size-1) rounds a rank sends one segment
 * and receives another, in chunks of at most chunk_floats, sending chunk i+1
 * while chunk i is being received (peer_sendrecv), so the wire and the adds
 * overlap.  Every rank ends with the same bits: each segment is summed in one
 * fixed order around the ring and then copied, never re-added.
 * Frames: kind WIRE_ALLREDUCE, dtype F32, shape {floats}, step = the
 * training step, micro_batch = round * 65536 + chunk index (checked).  A
 * segment of more than 65536 chunks gets larger chunks (both ends compute
 * the same).  On encrypted connections peer_sendrecv seals and opens every
 * chunk; nothing here changes. */
#ifndef SHOAL_AGENT_RING_H
#define SHOAL_AGENT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/codec.h"
#include "../../common/err.h"
#include "peer.h"

#define RING_DEFAULT_CHUNK_FLOATS (256u << 10)   /* 1 MiB of fp32 */

struct ring {
    struct peer_conn *next;   /* to rank (rank + 1) % size */
    struct peer_conn *prev;   /* from rank (rank - 1 + size) % size */
    int rank, size;           /* size 1: nothing to do */
    size_t chunk_floats;      /* 0: RING_DEFAULT_CHUNK_FLOATS */
    int timeout_ms;           /* per chunk exchanged */
    struct peer_stop stop;    /* a reason to give up before the timeout; {0}: none */
};

/* Replaces data[0..n) on every rank by the sum over ranks.  n may be any
 * size, including smaller than `size` (empty segments).  On error (peer
 * failed, timed out, sent a wrong frame) returns -1 with err set; data is
 * then unspecified and the step must be aborted. */
int ring_allreduce_sum(struct ring *r, float *data, size_t n, uint64_t step, struct shoal_err *err);

/* ring_allreduce_sum with the chunks packed by `codec` (common/codec.h):
 * every rank packs what it sends in the reduce-scatter; the owner of a
 * finished segment packs it once and keeps what it unpacks to, and the
 * all-gather forwards those bytes unchanged, so every rank still ends with
 * the same bits.  Frames: dtype the codec's; int8 chunks are shape {rows,
 * CODEC_BLOCK} with the last row padded with zeros.  With `feedback` (n
 * floats) it is first added into data (what earlier calls lost) and then
 * holds what this rank's packing lost in this call: error feedback, so a
 * compressed sum drops nothing for good (summed over ranks, the feedback is
 * the exact sum minus the delivered one).  CODEC_F32 without feedback is
 * ring_allreduce_sum, bit for bit. */
int ring_allreduce_codec(struct ring *r, float *data, size_t n, uint64_t step, enum codec_id codec,
                         float *feedback, struct shoal_err *err);

/* Sends the `len` bytes at *data from rank `root` to every other rank
 * round the ring (root -> root+1 -> ... -> root-1), in chunks of at most
 * RING_STATE_CHUNK_BYTES, forwarding chunk i while chunk i+1 arrives.
 * Frames: kind WIRE_STATE, dtype WIRE_BYTES, step = `step`, micro_batch
 * 0 for the length (8 bytes, little-endian) then 1, 2, ... for the chunks.
 * On the root *data and *len are the caller's; elsewhere *data is set to a
 * new buffer of *len bytes (at most len_max, else an error) that the
 * caller frees.  A live resume hands a stage's weights and AdamW state to
 * replicas that lack them this way (live.h). */
#define RING_STATE_CHUNK_BYTES (1u << 20)
int ring_broadcast(struct ring *r, int root, unsigned char **data, size_t *len, size_t len_max, uint64_t step,
                   struct shoal_err *err);

/* Sends `mine` (a step's mean loss) to the next rank and returns the
 * previous rank's in *from_prev: one WIRE_LOSS frame each way, dtype
 * WIRE_BYTES, step = `step`, micro_batch 0, 8 bytes (a little-endian
 * IEEE double).  The last stages of a job pass their losses round before
 * the gradient all-reduce, so that a replica that dies after the
 * all-reduce, before its report, leaves its loss with a survivor, whose
 * report carries it (train.c, server/jobs/live_resume.h).  size >= 2. */
int ring_pass_loss(struct ring *r, double mine, double *from_prev, uint64_t step, struct shoal_err *err);

/* Bytes each rank sends for an all-reduce of n floats: 2(size-1)/size * 4n
 * plus frame headers (for reports and the cost model check).  Exact for
 * rank 0; other ranks differ by at most 4 bytes a round (uneven segments).
 * Encrypted connections add WIRE_SEAL_OVERHEAD (32 bytes) a frame. */
uint64_t ring_bytes_per_rank(size_t n, int size, size_t chunk_floats);

#endif
