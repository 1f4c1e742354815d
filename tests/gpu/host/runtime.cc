/* runtime.cc - the CUDA runtime calls of the host emulation (tests/gpu/host):
 * memory with an allocation registry, streams, events, devices and errors.
 * Work runs when it is queued; what that hides is in README.md. */
#include "hcu_internal.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define HCU_DEVICE_BYTES ((size_t)8 << 30) /* emulated memory per device */
#define HCU_MAX_DEVICES 16

struct hcu_stream {
    int device;
    int holds; /* collectives queued and not yet landed */
};

struct hcu_event {
    int recorded;
};

struct allocation {
    size_t bytes;
    enum hcu_mem kind;
};

/* Everything shared between host threads, under one lock. */
static std::mutex lock;
static std::condition_variable stream_idle;
static std::map<uintptr_t, allocation> allocations; /* by start address */
static std::set<hcu_stream *> streams;
static std::set<hcu_event *> events;
static size_t device_used;                           /* bytes, all devices */
static cudaError_t sticky = cudaSuccess;

static thread_local cudaError_t last_error = cudaSuccess;
static thread_local int current_device;

extern "C" cudaError_t hcu_set_last(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

extern "C" cudaError_t hcu_sticky(void)
{
    std::lock_guard<std::mutex> g(lock);
    return sticky;
}

extern "C" void hcu_fault(cudaError_t e, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> g(lock);
    if (sticky == cudaSuccess) {
        fprintf(stderr, "hcu: %s\n", msg);
        sticky = e;
    }
}

/* The answer of a call that found nothing wrong with its own arguments. */
static cudaError_t done(void)
{
    return hcu_set_last(hcu_sticky());
}

static int device_count(void)
{
    const char *s = getenv("SHOAL_HOST_CUDA_DEVICES");
    char *end = NULL;
    long n = s ? strtol(s, &end, 10) : 1;
    if (!s || !*s || *end || n < 0 || n > HCU_MAX_DEVICES)
        return 1;
    return (int)n;
}

extern "C" int hcu_current_device(void)
{
    return current_device;
}

/* Caller holds the lock. The allocation holding all of [p, p + bytes). */
static const allocation *find(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin())
        return NULL;
    --it;
    if (a - it->first > it->second.bytes || bytes > it->second.bytes - (a - it->first))
        return NULL;
    return &it->second;
}

extern "C" enum hcu_mem hcu_mem_kind(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(lock);
    const allocation *al = p ? find(p, bytes) : NULL;
    return al ? al->kind : HCU_MEM_NONE;
}

extern "C" int hcu_stream_valid(cudaStream_t s)
{
    std::lock_guard<std::mutex> g(lock);
    return !s || streams.count(s) != 0;
}

extern "C" void hcu_stream_hold(cudaStream_t s)
{
    std::lock_guard<std::mutex> g(lock);
    if (s && streams.count(s))
        s->holds++;
}

extern "C" void hcu_stream_release(cudaStream_t s)
{
    std::lock_guard<std::mutex> g(lock);
    if (s && streams.count(s) && s->holds > 0 && --s->holds == 0)
        stream_idle.notify_all();
}

/* ---- errors and devices ------------------------------------------------------ */

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

extern "C" cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e != cudaSuccess ? e : hcu_sticky();
}

extern "C" cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return hcu_set_last(cudaErrorInvalidValue);
    *count = device_count();
    return hcu_set_last(*count ? cudaSuccess : cudaErrorNoDevice);
}

extern "C" cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= device_count())
        return hcu_set_last(cudaErrorInvalidDevice);
    current_device = device;
    return done();
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return hcu_set_last(cudaErrorInvalidValue);
    *device = current_device;
    return done();
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return hcu_set_last(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count())
        return hcu_set_last(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "host emulation %d (tests/gpu/host)", device);
    prop->totalGlobalMem = HCU_DEVICE_BYTES;
    prop->major = 9;
    return done();
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
    return done();
}

/* ---- memory ------------------------------------------------------------------ */

static cudaError_t allocate(void **ptr, size_t bytes, enum hcu_mem kind)
{
    void *p;
    if (!ptr)
        return hcu_set_last(cudaErrorInvalidValue);
    *ptr = NULL;
    if (bytes == 0) /* as the runtime: success, and a NULL pointer */
        return done();
    {
        std::lock_guard<std::mutex> g(lock);
        if (kind == HCU_MEM_DEVICE && bytes > HCU_DEVICE_BYTES - device_used)
            return hcu_set_last(cudaErrorMemoryAllocation);
    }
    if (!(p = malloc(bytes)))
        return hcu_set_last(cudaErrorMemoryAllocation);
    /* A device's fresh memory holds whatever was there: here NaN in fp32 and
     * bf16 (and -1 in int32), so a read of what nothing wrote is seen. */
    memset(p, 0xff, bytes);
    std::lock_guard<std::mutex> g(lock);
    allocations[(uintptr_t)p] = allocation{bytes, kind};
    if (kind == HCU_MEM_DEVICE)
        device_used += bytes;
    *ptr = p;
    return sticky;
}

static cudaError_t release(void *p, enum hcu_mem kind)
{
    if (!p)
        return done();
    {
        std::lock_guard<std::mutex> g(lock);
        auto it = allocations.find((uintptr_t)p);
        if (it == allocations.end() || it->second.kind != kind)
            return hcu_set_last(cudaErrorInvalidValue);
        if (kind == HCU_MEM_DEVICE)
            device_used -= it->second.bytes;
        allocations.erase(it);
    }
    free(p);
    return done();
}

extern "C" cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    return allocate(ptr, bytes, HCU_MEM_DEVICE);
}

extern "C" cudaError_t cudaFree(void *ptr)
{
    return release(ptr, HCU_MEM_DEVICE);
}

extern "C" cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    return allocate(ptr, bytes, HCU_MEM_PINNED);
}

extern "C" cudaError_t cudaFreeHost(void *ptr)
{
    return release(ptr, HCU_MEM_PINNED);
}

/* 1 when [p, p + bytes) may be the `device` (or host) side of a copy. */
static int side_ok(const void *p, size_t bytes, int device)
{
    enum hcu_mem k = hcu_mem_kind(p, bytes);
    return device ? k == HCU_MEM_DEVICE : k != HCU_MEM_DEVICE;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                       cudaMemcpyKind kind, cudaStream_t stream)
{
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (bytes == 0) /* as the runtime: nothing to check (a stage of no blocks has NULL buffers) */
        return hcu_set_last(hcu_stream_valid(stream) ? hcu_sticky() : cudaErrorInvalidResourceHandle);
    if (!dst || !src)
        return hcu_set_last(cudaErrorInvalidValue);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
        return hcu_set_last(cudaErrorInvalidMemcpyDirection);
    if (!hcu_stream_valid(stream))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    /* A pointer that is not where `kind` says, or a range past the end of
     * its allocation, is refused (the runtime refuses the first, and the
     * second would fault on a device). */
    if (!side_ok(dst, bytes, dst_dev) || !side_ok(src, bytes, src_dev))
        return hcu_set_last(cudaErrorInvalidValue);
    if (hcu_sticky() == cudaSuccess)
        memmove(dst, src, bytes);
    return done();
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    return cudaMemcpyAsync(dst, src, bytes, kind, NULL);
}

extern "C" cudaError_t cudaMemsetAsync(void *dev, int value, size_t bytes, cudaStream_t stream)
{
    if (bytes == 0)
        return hcu_set_last(hcu_stream_valid(stream) ? hcu_sticky() : cudaErrorInvalidResourceHandle);
    if (!dev)
        return hcu_set_last(cudaErrorInvalidValue);
    if (!hcu_stream_valid(stream))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    if (!side_ok(dev, bytes, 1))
        return hcu_set_last(cudaErrorInvalidValue);
    if (hcu_sticky() == cudaSuccess)
        memset(dev, value, bytes);
    return done();
}

/* ---- streams and events -------------------------------------------------------- */

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    (void)flags;
    if (!stream)
        return hcu_set_last(cudaErrorInvalidValue);
    hcu_stream *s = new hcu_stream{current_device, 0};
    std::lock_guard<std::mutex> g(lock);
    streams.insert(s);
    *stream = s;
    return sticky;
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    std::unique_lock<std::mutex> g(lock);
    if (!stream || !streams.count(stream))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    /* as the runtime: work still queued finishes first */
    stream_idle.wait(g, [&] { return stream->holds == 0; });
    streams.erase(stream);
    delete stream;
    return sticky;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    std::unique_lock<std::mutex> g(lock);
    if (stream && !streams.count(stream))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    if (stream)
        stream_idle.wait(g, [&] { return stream->holds == 0 || sticky != cudaSuccess; });
    return hcu_set_last(sticky);
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    std::lock_guard<std::mutex> g(lock);
    if (stream && !streams.count(stream))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    if (sticky != cudaSuccess)
        return hcu_set_last(sticky);
    return stream && stream->holds ? cudaErrorNotReady : cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
    (void)flags;
    if (!event)
        return hcu_set_last(cudaErrorInvalidValue);
    hcu_event *e = new hcu_event{0};
    std::lock_guard<std::mutex> g(lock);
    events.insert(e);
    *event = e;
    return sticky;
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    {
        std::lock_guard<std::mutex> g(lock);
        if (!event || !events.erase(event))
            return hcu_set_last(cudaErrorInvalidResourceHandle);
    }
    delete event;
    return done();
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    std::lock_guard<std::mutex> g(lock);
    if (!event || !events.count(event) || (stream && !streams.count(stream)))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    event->recorded = 1;
    return hcu_set_last(sticky);
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
    std::lock_guard<std::mutex> g(lock);
    if (!event || !events.count(event) || (stream && !streams.count(stream)))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    if (flags != 0)
        return hcu_set_last(cudaErrorInvalidValue);
    return hcu_set_last(sticky);
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    std::lock_guard<std::mutex> g(lock);
    if (!event || !events.count(event))
        return hcu_set_last(cudaErrorInvalidResourceHandle);
    return hcu_set_last(sticky);
}
