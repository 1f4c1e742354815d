/* nccl.h - the data-parallel group of a stage on CUDA nodes, through
 * NCCL: the gradient all-reduce, the last stage's losses passed round, and
 * a live resume's state handed from one replica to the others.
 *
 * A stage's replicas form one NCCL communicator: rank = replica, size =
 * replicas.  They need a shared 128-byte ncclUniqueId before they can talk,
 * so replica 0 creates it and puts it on the server (PUT /v1/agent/nccl,
 * ASCII hex on the wire) and the others poll GET /v1/agent/nccl for it.
 * The communicator is non-blocking, so every wait is bounded: a peer that
 * dies makes a call fail with "peer_timeout" instead of hanging the agent.
 *
 * agent/net/nccl.c implements this where the build has CUDA (CUDA=1);
 * agent/net/nccl_none.c, built otherwise, fails every call and says why.
 * Not thread-safe: one thread drives a group. */
#ifndef SHOAL_AGENT_NCCL_H
#define SHOAL_AGENT_NCCL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define NCCL_ID_PATH "/v1/agent/nccl"
#define NCCL_POLL_S 0.2   /* s between GETs while waiting for replica 0's id */

struct ctl;
struct nccl_group;   /* one communicator for a stage's data-parallel group */

/* 1 when this build has NCCL, else 0. */
int nccl_built(void);

/* Joins the data-parallel group of `stage` in plan epoch `epoch` of job
 * `job_id` as `rank` of `size` (rank = replica).  Rank 0 creates the
 * unique id and PUTs it; the others poll GET every NCCL_POLL_S seconds
 * until it appears.  Then ncclCommInitRankConfig on CUDA device `device_index`,
 * which waits for every rank.  The whole call takes at most about
 * timeout_s seconds (s).  Every wait, here and in the group's later calls,
 * also ends when ctl's stop flag is set (err 503 "stopped": an agent that
 * is shutting down does not wait out its peers) or `abort` is (err 503
 * "aborted": the tasklet's assignment was replaced, its job re-planned);
 * `abort` (the tasklet's flag, train_env.abort; NULL: none) must outlive
 * the group.  On success *out is a new group (free with nccl_group_close)
 * and 0 is returned; else -1 with err set ("peer_timeout" when the id or a
 * peer did not come in time, the server's error when it refused) and *out
 * NULL. */
int nccl_group_open(const struct ctl *ctl, const atomic_int *abort, int64_t job_id, uint32_t epoch, int stage,
                    int rank, int size, int device_index, double timeout_s, struct nccl_group **out,
                    struct shoal_err *err);

/* Replaces device_data[0..n) (device memory on the group's device: the
 * stage's gradient buffer, complete when called) by its sum over the
 * group's ranks, on the group's own stream, and waits for it at most
 * timeout_s seconds (s), or until a flag the group was opened with is set
 * ("stopped", "aborted").  Returns 0 once the sum is in place.  On
 * timeout the communicator is aborted (err "peer_timeout"); on that or any
 * other error -1 is returned, device_data is unspecified and the group is
 * unusable: close it. */
int nccl_allreduce_sum(struct nccl_group *g, float *device_data, size_t n, double timeout_s,
                       struct shoal_err *err);

/* Passes each rank's `mine` (the last stage's mean loss of the step) to
 * every rank with one all-gather of its 8 bytes, and returns the previous
 * rank's ((rank - 1 + size) % size) in *from_prev, bit for bit: what the
 * ring's ring_pass_loss gives, so that a report's ring_prev_loss means the
 * same under NCCL.  The last stages call it before the gradient
 * all-reduce, so that a replica that dies after the all-reduce, before its
 * report, leaves its loss with a survivor.  Waits as nccl_allreduce_sum,
 * and fails as it does (the group then unusable). */
int nccl_pass_loss(struct nccl_group *g, double mine, double *from_prev, double timeout_s, struct shoal_err *err);

/* ring_broadcast's contract (ring.h) over NCCL: the root's
 * (*data)[0..*len) to every other rank of the group.  The length goes
 * first (one broadcast of its 8 bytes, a uint64_t as the host stores it);
 * a rank that is not the root checks it is 1..len_max (else it fails with
 * 502 "peer_protocol" and aborts the group, so that the root and the
 * others fail fast), then receives the bytes into *data (malloc'd; the
 * caller frees) and sets *len.  The bytes go in chunks of
 * NCCL_STATE_CHUNK_BYTES through one device staging buffer of that size
 * (or of the length, when shorter): copied in at the root, broadcast,
 * copied out at the others.  The root's *data and *len are left as they
 * were.  Each broadcast waits at most timeout_s (s), or until a flag the
 * group was opened with is set, as nccl_allreduce_sum does.  On any
 * failure -1 is returned with err set, a receiver's *data and *len are
 * untouched, and the group is unusable: close it.  A live resume hands a
 * stage's weights and AdamW state to replicas that lack them this way
 * (live.h). */
#define NCCL_STATE_CHUNK_BYTES ((size_t)16 << 20)   /* bytes */
int nccl_broadcast_bytes(struct nccl_group *g, int root, unsigned char **data, size_t *len, size_t len_max,
                         double timeout_s, struct shoal_err *err);

/* Releases the communicator and the stream; NULL is ignored.  A group whose
 * peers are gone is aborted rather than waited on. */
void nccl_group_close(struct nccl_group *g);

#endif
