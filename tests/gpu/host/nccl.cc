// nccl.cc - the host emulation of NCCL (nccl.h): ranks are threads of one
// process, a communicator is a rendezvous in a process-wide registry.
//
// One mutex guards everything here (the registry, every group, every
// communicator), so each call is atomic with respect to the others; a
// condition variable wakes blocking inits and finalizes.  The runtime's
// locks (hcu_stream_hold/release) are only ever taken under ours, never
// the other way round.
//
// A collective is numbered per communicator (the k-th call of each rank
// meets the k-th call of the others, as on NCCL's ordered channels); the
// rank that completes collective k lands it for every rank (an all-reduce
// sums every rank's send buffer in rank order and writes the same bits into
// every receive buffer; an all-gather writes rank r's bytes at slot r of
// every receive buffer; a broadcast writes the root's bytes into every one)
// and releases every rank's stream.
#include "nccl.h"

#include <sys/random.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "hcu_internal.h"

namespace {

// The id's first bytes, so that an id from anywhere else is refused rather
// than waited on; the key that names the rendezvous follows.
const char id_magic[] = "shoal-hcu-nccl";
const size_t id_key_bytes = 16;  // 128 random bits

struct group;

}  // namespace

struct ncclComm {
    group *g = nullptr;  // nullptr: refused at init, never joined (holds only its error)
    int rank = 0;
    int device = 0;      // the CUDA device current on the thread that called init
    bool blocking = true;
    bool finalizing = false;
    ncclResult_t async_error = ncclSuccess;  // the first failure, sticky
    std::string last_error;                  // a sentence about it
    uint64_t next_collective = 0;            // number of this rank's next collective
    int pending = 0;                         // its collectives queued and not ended
};

namespace {

enum group_state { GROUP_FORMING, GROUP_READY, GROUP_FAILED };

// The collectives emulated; every rank of collective k must make the same.
enum coll_op { OP_ALL_REDUCE, OP_ALL_GATHER, OP_BROADCAST };
const char *const op_call[] = { "ncclAllReduce", "ncclAllGather", "ncclBroadcast" };

// One rank's part of a collective.
struct part {
    ncclComm *comm = nullptr;  // nullptr: this rank has not called it yet
    coll_op op = OP_ALL_REDUCE;
    const unsigned char *send = nullptr;  // a broadcast's: only the root's is read
    unsigned char *recv = nullptr;
    size_t count = 0;          // elements each rank sends (an all-gather receives size times as many)
    ncclDataType_t type = ncclFloat32;
    ncclRedOp_t redop = ncclSum;  // an all-reduce's
    int root = 0;              // a broadcast's
    cudaStream_t stream = nullptr;
};

struct collective {
    std::vector<part> parts;   // by rank
    int arrived = 0;
};

// The ranks of one unique id.
struct group {
    std::string key;           // the id's bytes
    int size = 0;
    std::vector<ncclComm *> members;  // by rank; nullptr: not joined yet, or gone
    std::vector<bool> seen;    // by rank: it joined (it may be gone since)
    int joined = 0;            // ranks that ever joined
    int live = 0;              // members not freed yet
    group_state state = GROUP_FORMING;
    bool registered = true;    // still in the registry, so later ranks find it
    bool departed = false;     // a member left: no collective can complete any more
    std::string departed_why;
    std::map<uint64_t, collective> collectives;  // pending, by number
};

std::mutex mu;
std::condition_variable changed;  // a group formed or failed, a collective ended
std::map<std::string, group *> registry;

thread_local std::string thread_error;      // this thread's last failed call
thread_local char last_error_answer[512];   // what ncclGetLastError returns

std::string vformat(const char *fmt, va_list ap)
{
    char buf[384];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

// A call of this thread failed at once: returns r, remembers why (for c
// too, when given: then mu is held, since a peer may write c's error).
__attribute__((format(printf, 3, 4))) ncclResult_t refuse(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thread_error = vformat(fmt, ap);
    va_end(ap);
    if (c)
        c->last_error = thread_error;
    return r;
}

// `c` broke (mu held): its first error sticks, as NCCL's async error does.
__attribute__((format(printf, 3, 4))) void comm_fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
    if (c->async_error != ncclSuccess)
        return;
    va_list ap;
    va_start(ap, fmt);
    c->last_error = vformat(fmt, ap);
    va_end(ap);
    c->async_error = r;
}

// Bytes of one element of `type`; 0: a type the emulation does not move.
size_t type_bytes(ncclDataType_t type)
{
    switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat32: return 4;
    default: return 0;
    }
}

// The sum over the ranks, in rank order, into every receive buffer.
void land_sum(const collective &k, int size)
{
    size_t n = k.parts[0].count;
    std::vector<float> total(n), term(n);
    memcpy(total.data(), k.parts[0].send, n * sizeof(float));
    for (int r = 1; r < size; r++) {
        memcpy(term.data(), k.parts[r].send, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            total[i] += term[i];
    }
    for (const part &p : k.parts)
        memcpy(p.recv, total.data(), n * sizeof(float));
}

// Rank r's bytes at slot r of every receive buffer.  Taken first, then
// written: in place (send = recv + rank's slot) is allowed.
void land_gather(const collective &k, int size)
{
    size_t bytes = k.parts[0].count * type_bytes(k.parts[0].type);
    std::vector<unsigned char> all(bytes * (size_t)size);
    for (int r = 0; r < size; r++)
        memcpy(all.data() + (size_t)r * bytes, k.parts[r].send, bytes);
    for (const part &p : k.parts)
        memcpy(p.recv, all.data(), all.size());
}

// The root's bytes into every receive buffer (the root's own may be its
// send buffer).
void land_broadcast(const collective &k)
{
    const part &root = k.parts[k.parts[0].root];
    std::vector<unsigned char> bytes(root.send, root.send + root.count * type_bytes(root.type));
    for (const part &p : k.parts)
        memcpy(p.recv, bytes.data(), bytes.size());
}

// Ends collective `it` (mu held): every part is released, and when `land`
// the receive buffers get what the collective delivers first.
void collective_end(group *g, std::map<uint64_t, collective>::iterator it, bool land)
{
    collective &k = it->second;
    if (land && k.parts[0].op == OP_ALL_REDUCE)
        land_sum(k, g->size);
    else if (land && k.parts[0].op == OP_ALL_GATHER)
        land_gather(k, g->size);
    else if (land)
        land_broadcast(k);
    for (part &p : k.parts) {
        if (!p.comm)
            continue;
        p.comm->pending--;
        hcu_stream_release(p.stream);
    }
    g->collectives.erase(it);
    changed.notify_all();
}

// Collective `it` has every rank (mu held): land it, or fail every rank
// when their calls differ in the collective, count, datatype or root (NCCL
// would corrupt memory or hang; the emulation says so instead).
void collective_complete(group *g, std::map<uint64_t, collective>::iterator it)
{
    collective &k = it->second;
    const part &a = k.parts[0];
    for (int r = 1; r < g->size; r++) {
        const part &b = k.parts[r];
        if (b.op == a.op && b.count == a.count && b.type == a.type && (a.op != OP_BROADCAST || b.root == a.root))
            continue;
        for (part &p : k.parts)
            comm_fail(p.comm, ncclInvalidUsage, "collective %llu: rank 0 called %s of %zu elements of datatype %d "
                      "(root %d) but rank %d %s of %zu of datatype %d (root %d); every rank must make the same "
                      "call with the same count, datatype and root", (unsigned long long)it->first, op_call[a.op],
                      a.count, (int)a.type, a.root, r, op_call[b.op], b.count, (int)b.type, b.root);
        collective_end(g, it, false);
        return;
    }
    collective_end(g, it, true);
}

// Marks `g` failed (mu held): every member gets error r.
__attribute__((format(printf, 3, 4))) void group_fail(group *g, ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string why = vformat(fmt, ap);
    va_end(ap);
    g->state = GROUP_FAILED;
    for (ncclComm *m : g->members)
        if (m)
            comm_fail(m, r, "%s", why.c_str());
    changed.notify_all();
}

// `c` leaves its group for good (mu held; `how` names the call): every
// pending collective is cancelled, its peers' with ncclRemoteError, and so
// is every later one.  The last member to leave frees the group.
void comm_leave(ncclComm *c, const char *how)
{
    group *g = c->g;
    if (!g)
        return;
    std::string why = "rank " + std::to_string(c->rank) + " of " + std::to_string(g->size) +
                      " left the communicator (" + how + ")";
    while (!g->collectives.empty()) {
        auto it = g->collectives.begin();
        for (part &p : it->second.parts)
            if (p.comm && p.comm != c)
                comm_fail(p.comm, ncclRemoteError, "%s while collective %llu was in flight", why.c_str(),
                          (unsigned long long)it->first);
        collective_end(g, it, false);
    }
    if (g->state == GROUP_FORMING) {
        g->members[c->rank] = nullptr;
        group_fail(g, ncclRemoteError, "%s while it was forming", why.c_str());
    }
    if (!g->departed) {
        g->departed = true;
        g->departed_why = why;
    }
    g->members[c->rank] = nullptr;
    c->g = nullptr;
    if (--g->live > 0)
        return;
    if (g->registered)
        registry.erase(g->key);
    delete g;
}

// The communicator is ready for a new operation (mu held), as NCCL's
// ncclCommEnsureReady checks: its error, or ncclInvalidArgument while it
// forms.
ncclResult_t comm_ready(ncclComm *c, const char *call)
{
    if (c->async_error != ncclSuccess) {
        thread_error = c->last_error;  // c's own error still says what broke it
        return c->async_error;
    }
    if (c->g->state == GROUP_FORMING)
        return refuse(c, ncclInvalidArgument, "%s on a communicator that has not formed yet (ncclCommGetAsyncError "
                      "still says ncclInProgress)", call);
    if (c->finalizing)
        return refuse(c, ncclInvalidUsage, "%s after ncclCommFinalize", call);
    return ncclSuccess;
}

// The rank that completes a group checks it (mu held): NCCL refuses two
// ranks on one GPU.
void group_formed(group *g)
{
    for (int a = 0; a < g->size; a++)
        for (int b = a + 1; b < g->size; b++)
            if (g->members[a]->device == g->members[b]->device) {
                group_fail(g, ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d",
                           a, b, g->members[a]->device);
                return;
            }
    g->state = GROUP_READY;
    g->registered = false;  // complete: a later rank with this id starts a rendezvous of its own
    registry.erase(g->key);
    changed.notify_all();
}

// The refusals a collective's call gets at once (mu held), as NCCL's
// argument checks give them: a datatype or reduction the call does not
// take (an all-reduce: the fp32 sum only), a count
// too large, a root out of range, a buffer that is not device memory of
// the bytes it must hold, a dead stream.
ncclResult_t part_refused(ncclComm *comm, const part &p)
{
    const char *call = op_call[p.op];
    size_t each = type_bytes(p.type), ranks = (size_t)comm->g->size;
    if (p.op == OP_ALL_REDUCE && p.type != ncclFloat32)
        return refuse(comm, ncclInvalidArgument, "%s: datatype %d is not emulated (only ncclFloat32)", call,
                      (int)p.type);
    if (p.op == OP_ALL_REDUCE && p.redop != ncclSum)
        return refuse(comm, ncclInvalidArgument, "%s: op %d is not emulated (only ncclSum)", call, (int)p.redop);
    if (!each)
        return refuse(comm, ncclInvalidArgument, "%s: datatype %d is not emulated (only ncclInt8, ncclUint8 and "
                      "ncclFloat32)", call, (int)p.type);
    if (p.count > SIZE_MAX / each / ranks)
        return refuse(comm, ncclInvalidArgument, "%s: count %zu is too large", call, p.count);
    if (p.op == OP_BROADCAST && (p.root < 0 || (size_t)p.root >= ranks))
        return refuse(comm, ncclInvalidArgument, "%s: root %d is not a rank of %zu", call, p.root, ranks);
    size_t send_bytes = p.count * each, recv_bytes = p.op == OP_ALL_GATHER ? send_bytes * ranks : send_bytes;
    bool reads_send = p.op != OP_BROADCAST || p.root == comm->rank;  // NCCL reads only the root's
    if (p.count && reads_send && hcu_mem_kind(p.send, send_bytes) != HCU_MEM_DEVICE)
        return refuse(comm, ncclInvalidArgument, "%s: sendbuff %p is not device memory of %zu bytes", call,
                      (const void *)p.send, send_bytes);
    if (p.count && hcu_mem_kind(p.recv, recv_bytes) != HCU_MEM_DEVICE)
        return refuse(comm, ncclInvalidArgument, "%s: recvbuff %p is not device memory of %zu bytes", call,
                      (void *)p.recv, recv_bytes);
    if (!hcu_stream_valid(p.stream))
        return refuse(comm, ncclUnhandledCudaError, "%s: stream %p is not a live stream", call, (void *)p.stream);
    return ncclSuccess;
}

// Queues p, this rank's part of its next collective, on p.stream: it
// lands when every rank's part has come (collective_complete).
ncclResult_t collective_call(ncclComm *comm, part p)
{
    if (!comm)
        return refuse(nullptr, ncclInvalidArgument, "%s: comm is NULL", op_call[p.op]);
    // The runtime's lock is taken under ours (hcu_mem_kind), never the other way round.
    std::lock_guard<std::mutex> lock(mu);
    ncclResult_t r = comm_ready(comm, op_call[p.op]);
    if (r == ncclSuccess)
        r = part_refused(comm, p);
    if (r != ncclSuccess)
        return r;
    if (p.count == 0)  // nothing to move: NCCL returns at once
        return ncclSuccess;
    group *g = comm->g;
    uint64_t number = comm->next_collective++;
    if (g->departed) {
        // Its peer's connections are closed: the collective fails in flight.
        comm_fail(comm, ncclRemoteError, "%s before collective %llu", g->departed_why.c_str(),
                  (unsigned long long)number);
        return ncclSuccess;
    }
    auto it = g->collectives.try_emplace(number).first;
    collective &k = it->second;
    if (k.parts.empty())
        k.parts.resize(g->size);
    p.comm = comm;
    k.parts[comm->rank] = p;
    comm->pending++;
    hcu_stream_hold(p.stream);
    if (++k.arrived == g->size)
        collective_complete(g, it);
    return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return refuse(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, id_magic, sizeof id_magic);
    char *key = uniqueId->internal + sizeof id_magic;
    for (size_t got = 0; got < id_key_bytes;) {
        ssize_t n = getrandom(key + got, id_key_bytes - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return refuse(nullptr, ncclSystemError, "ncclGetUniqueId: getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    if (!comm)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
    if (nranks < 1)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: nranks %d is below 1", nranks);
    if (rank < 0 || rank >= nranks)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: rank %d is not in [0, %d)", rank,
                      nranks);
    if (config && (config->size != sizeof *config || config->magic != NCCL_CONFIG_MAGIC))
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the config was not set from "
                      "NCCL_CONFIG_INITIALIZER");
    if (config && config->blocking != 0 && config->blocking != 1 && config->blocking != NCCL_CONFIG_UNDEF_INT)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: config blocking %d is not 0 or 1",
                      config->blocking);
    if (memcmp(commId.internal, id_magic, sizeof id_magic) != 0)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the unique id was not made by "
                      "ncclGetUniqueId");

    ncclComm *c = new ncclComm;
    c->rank = rank;
    c->device = hcu_current_device();
    c->blocking = !config || config->blocking != 0;
    std::string key(commId.internal, sizeof commId.internal);

    std::unique_lock<std::mutex> lock(mu);
    auto found = registry.find(key);
    group *g = found == registry.end() ? nullptr : found->second;
    if (!g) {
        g = new group;
        g->key = key;
        g->size = nranks;
        g->members.assign(nranks, nullptr);
        g->seen.assign(nranks, false);
        registry[key] = g;
    }
    if (g->size != nranks || g->seen[rank]) {
        // Refused, and so is the whole rendezvous: NCCL's bootstrap fails
        // every rank of a communicator whose ranks disagree.
        std::string why = g->size != nranks
            ? "rank " + std::to_string(rank) + " joined with nranks " + std::to_string(nranks) + ", others with " +
                  std::to_string(g->size)
            : "two ranks joined as rank " + std::to_string(rank);
        if (g->state != GROUP_READY)
            group_fail(g, ncclInvalidUsage, "ncclCommInitRankConfig: %s", why.c_str());
        comm_fail(c, ncclInvalidUsage, "ncclCommInitRankConfig: %s", why.c_str());
    } else {
        c->g = g;
        g->members[rank] = c;
        g->seen[rank] = true;
        g->joined++;
        g->live++;
        if (g->state == GROUP_FAILED)
            comm_fail(c, ncclRemoteError, "ncclCommInitRankConfig: the communicator failed before rank %d joined",
                      rank);
        else if (g->joined == g->size)
            group_formed(g);
    }
    if (!c->blocking) {
        *comm = c;
        return ncclInProgress;
    }
    changed.wait(lock, [c] { return c->async_error != ncclSuccess || c->g->state != GROUP_FORMING; });
    if (c->async_error == ncclSuccess) {
        *comm = c;
        return ncclSuccess;
    }
    // A blocking init that fails leaves nothing to free.
    ncclResult_t r = refuse(nullptr, c->async_error, "%s", c->last_error.c_str());
    comm_leave(c, "its blocking init failed");
    delete c;
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: %s is NULL", comm ? "asyncError" : "comm");
    std::lock_guard<std::mutex> lock(mu);
    if (comm->async_error != ncclSuccess)
        *asyncError = comm->async_error;
    else if (comm->g->state == GROUP_FORMING || (comm->finalizing && comm->pending > 0))
        *asyncError = ncclInProgress;
    else
        *asyncError = ncclSuccess;
    return ncclSuccess;
}

// One rank's call of collective `op`: what every entry point below fills in.
static part part_of(coll_op op, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                    cudaStream_t stream)
{
    part p;
    p.op = op;
    p.send = static_cast<const unsigned char *>(sendbuff);
    p.recv = static_cast<unsigned char *>(recvbuff);
    p.count = count;
    p.type = datatype;
    p.stream = stream;
    return p;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    part p = part_of(OP_ALL_REDUCE, sendbuff, recvbuff, count, datatype, stream);
    p.redop = op;
    return collective_call(comm, p);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return collective_call(comm, part_of(OP_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, stream));
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    part p = part_of(OP_BROADCAST, sendbuff, recvbuff, count, datatype, stream);
    p.root = root;
    return collective_call(comm, p);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm)
        return refuse(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    std::unique_lock<std::mutex> lock(mu);
    ncclResult_t r = comm_ready(comm, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    comm->finalizing = true;
    if (!comm->blocking)
        return comm->pending > 0 ? ncclInProgress : ncclSuccess;
    changed.wait(lock, [comm] { return comm->pending == 0 || comm->async_error != ncclSuccess; });
    return comm->async_error;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    std::lock_guard<std::mutex> lock(mu);
    comm_leave(comm, "ncclCommDestroy");
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    std::lock_guard<std::mutex> lock(mu);
    comm_leave(comm, "ncclCommAbort");
    delete comm;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    // Copied under the lock: a peer's thread may be writing comm's error.
    std::lock_guard<std::mutex> lock(mu);
    const std::string &e = comm && !comm->last_error.empty() ? comm->last_error : thread_error;
    snprintf(last_error_answer, sizeof last_error_answer, "%s", e.c_str());
    return last_error_answer;
}

}  // extern "C"
