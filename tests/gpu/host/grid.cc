/* grid.cc - kernel launches on the host (tests/gpu/host): every block of a
 * grid in turn, one fibre per CUDA thread.
 *
 * A fibre is a stack of its own; it is made once with makecontext and then
 * entered and left with the compiler's __builtin_setjmp/__builtin_longjmp,
 * which save a frame and a stack pointer and nothing else: no system call
 * (swapcontext sets the signal mask on every switch) and no sanitizer
 * interceptor (ASan's longjmp unpoisons the whole stack it leaves; both cost
 * more than the kernels). Fibres are pooled per host thread and reused by
 * every block. ASan is told of every stack switch
 * (__sanitizer_start/finish_switch_fiber).
 *
 * The scheduler runs each ready fibre until it returns or waits at a
 * barrier. When none is ready: a warp whose live lanes all wait at a shuffle
 * goes on; else, when every live thread waits at __syncthreads, the block
 * goes on; else the threads wait at different barriers, which is a deadlock
 * (or undefined behaviour) on a device: reported as a fault. */
#include "hcu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <omp.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define HCU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HCU_ASAN 1
#endif
#endif
#ifdef HCU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define HCU_MAX_THREADS 1024          /* per block, as on a device */
#define HCU_STACK_BYTES (256u << 10)  /* per fibre; kernels keep little on the stack */
#define HCU_PAGE 4096u

thread_local hcu_where hcu_here;

#define HCU_SHARED_MAX (48u << 10) /* bytes of static shared memory a block may have */

unsigned char *hcu_shared_buffer(size_t bytes)
{
    static thread_local unsigned char *buf;
    if (bytes > HCU_SHARED_MAX)
        hcu_fault(cudaErrorInvalidConfiguration, "a kernel's shared buffer of %zu bytes is over a device's %u",
                  bytes, HCU_SHARED_MAX);
    if (!buf && !(buf = (unsigned char *)aligned_alloc(128, HCU_SHARED_MAX)))
        hcu_fault(cudaErrorMemoryAllocation, "cannot allocate a shared buffer of %u bytes", HCU_SHARED_MAX);
    return buf;
}

enum fibre_state { F_READY, F_SYNC, F_WARP, F_DONE };

struct fibre {
    void *at[5];           /* where it waits (__builtin_setjmp) */
    ucontext_t boot;       /* its first entry */
    char *map;             /* guard page + stack */
    char *stack;           /* HCU_STACK_BYTES */
    enum fibre_state state;
    unsigned shuffles;     /* shuffles passed: which slot it posts to */
    unsigned shfl_mask;    /* the mask of the shuffle it waits at */
    void *fake_stack;      /* ASan's, while it is switched out */
};

/* One host thread's block in progress, and its fibre pool. */
struct block_run {
    void *sched[5];                      /* the scheduler, while a fibre runs */
    ucontext_t sched_boot;               /* the scheduler, while a fibre boots */
    const void *sched_bottom;            /* the scheduler's stack, for ASan */
    size_t sched_size;
    struct fibre *fibres[HCU_MAX_THREADS];
    unsigned pooled;                     /* fibres made so far */
    unsigned threads;                    /* in this block */
    unsigned current;                    /* the fibre that runs */
    void (*body)(void *);
    void *arg;
    uint64_t posted[2][HCU_MAX_THREADS]; /* shuffle values, by parity of the shuffle count */
    const char *kernel;                  /* name, for messages */
    int failed;                          /* this launch faulted: stop running blocks */
};

static thread_local struct block_run *run_here;

/* ---- switching ------------------------------------------------------------ */

static void switch_start(void **fake, const void *bottom, size_t size)
{
#ifdef HCU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

static void switch_finish(void *fake, const void **bottom, size_t *size)
{
#ifdef HCU_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

/* Resumes what saved `to`. Its own function, since __builtin_longjmp may
 * not be called from the function that called __builtin_setjmp; neither
 * declared nor found (noipa) noreturn, nor instrumented, since ASan puts its stack unpoisoning
 * (__asan_handle_no_return: a system call and a memset of the shadow of
 * the whole stack) before every call that does not return. */
__attribute__((noipa, no_sanitize_address)) static void jump(void **to)
{
    __builtin_longjmp(to, 1);
}

/* From the running fibre back to the scheduler; returns when resumed. */
static void fibre_yield(struct block_run *r, struct fibre *f)
{
    switch_start(&f->fake_stack, r->sched_bottom, r->sched_size);
    if (__builtin_setjmp(f->at) == 0)
        jump(r->sched);
    switch_finish(f->fake_stack, NULL, NULL);
}

/* From the scheduler into fibre i until it yields. */
static void fibre_enter(struct block_run *r, unsigned i)
{
    struct fibre *f = r->fibres[i];
    void *fake = NULL;
    unsigned bx = hcu_here.block_dim.x, by = hcu_here.block_dim.y;
    r->current = i;
    hcu_here.thread.x = i % bx;
    hcu_here.thread.y = (i / bx) % by;
    hcu_here.thread.z = i / (bx * by);
    switch_start(&fake, f->stack, HCU_STACK_BYTES);
    if (__builtin_setjmp(r->sched) == 0)
        jump(f->at);
    switch_finish(fake, NULL, NULL);
}

/* A fibre's whole life: park, then run the block's body each time it is
 * entered with a new thread, and say when it returned. */
static void fibre_main(void)
{
    struct fibre *const f = run_here->fibres[run_here->pooled];
    switch_finish(NULL, &run_here->sched_bottom, &run_here->sched_size);
    switch_start(&f->fake_stack, run_here->sched_bottom, run_here->sched_size);
    if (__builtin_setjmp(f->at) == 0)
        setcontext(&run_here->sched_boot); /* made: back to fibre_new */
    for (;;) {
        switch_finish(f->fake_stack, NULL, NULL);
        run_here->body(run_here->arg);
        f->state = F_DONE;
        switch_start(&f->fake_stack, run_here->sched_bottom, run_here->sched_size);
        if (__builtin_setjmp(f->at) == 0)
            jump(run_here->sched);
    }
}

/* Makes fibre number r->pooled; 0, or -1 when out of memory. getcontext
 * returns twice (`entered` tells which): first to enter the new fibre, then
 * when it has parked. (swapcontext would do both, but ASan warns of it.) */
static int fibre_new(struct block_run *r)
{
    struct fibre *f = (struct fibre *)calloc(1, sizeof *f);
    static thread_local void *fake;
    volatile int entered = 0;
    if (!f)
        return -1;
    f->map = (char *)mmap(NULL, HCU_STACK_BYTES + HCU_PAGE, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->map == MAP_FAILED) {
        free(f);
        return -1;
    }
    mprotect(f->map, HCU_PAGE, PROT_NONE); /* an overflow faults at once */
    f->stack = f->map + HCU_PAGE;
    r->fibres[r->pooled] = f;
    getcontext(&f->boot);
    f->boot.uc_stack.ss_sp = f->stack;
    f->boot.uc_stack.ss_size = HCU_STACK_BYTES;
    f->boot.uc_link = NULL;
    makecontext(&f->boot, fibre_main, 0);
    getcontext(&r->sched_boot);
    if (!entered) {
        entered = 1;
        switch_start(&fake, f->stack, HCU_STACK_BYTES);
        setcontext(&f->boot);
    }
    switch_finish(fake, NULL, NULL);
    r->pooled++;
    return 0;
}

static void pool_drop(struct block_run *r);

/* Frees a host thread's block_run and pool when the thread ends (a rank
 * thread of test_nccl_host, the OpenMP workers it started): its fibres are
 * parked between blocks, and nothing will enter them again. */
struct run_release {
    int armed;
    ~run_release()
    {
        if (!run_here)
            return;
        pool_drop(run_here);
        free(run_here);
        run_here = NULL;
    }
};
static thread_local struct run_release run_release_here;

static struct block_run *run_get(void)
{
    if (!run_here && (run_here = (struct block_run *)calloc(1, sizeof *run_here)))
        run_release_here.armed = 1; /* its first use registers the release at thread exit */
    return run_here;
}

/* ---- barriers --------------------------------------------------------------- */

void __syncthreads()
{
    struct block_run *r = run_here;
    struct fibre *f = r->fibres[r->current];
    f->state = F_SYNC;
    fibre_yield(r, f);
}

uint64_t hcu_shfl_xor(unsigned mask, uint64_t v, int lane_mask, int width)
{
    struct block_run *r = run_here;
    unsigned me = r->current, lane = me % 32, warp0 = me - lane;
    struct fibre *f = r->fibres[me];
    unsigned slot = f->shuffles & 1, src;
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
        hcu_fault(cudaErrorLaunchFailure, "%s: __shfl_xor_sync width %d is not a power of 2 "
                  "up to 32", r->kernel, width);
        r->failed = 1;
    }
    r->posted[slot][me] = v;
    f->shfl_mask = mask;
    f->state = F_WARP;
    fibre_yield(r, f);
    f->shuffles++;
    src = lane ^ (unsigned)lane_mask;
    /* outside this lane's segment of `width` lanes: its own value */
    if (r->failed || src / (unsigned)width != lane / (unsigned)width || src >= 32)
        return v;
    return r->posted[slot][warp0 + src];
}

/* Lanes of warp w that exist in a block of n threads, as a mask. */
static unsigned warp_lanes(unsigned w, unsigned n)
{
    unsigned left = n - 32 * w;
    return left >= 32 ? 0xffffffffu : (1u << left) - 1;
}

/* All fibres wait or are done: lets the ones that may go on go. Returns 1
 * when some went on, 0 when all are done, -1 on a deadlock (reported). */
static int release(struct block_run *r)
{
    unsigned n = r->threads, waiting_sync = 0, live = 0;
    int released = 0;
    for (unsigned w = 0; w * 32 < n; w++) {
        unsigned lanes = warp_lanes(w, n), at_shfl = 0, live_lanes = 0, mask = 0;
        for (unsigned l = 0; l < 32 && w * 32 + l < n; l++) {
            struct fibre *f = r->fibres[w * 32 + l];
            if (f->state != F_DONE)
                live_lanes |= 1u << l;
            if (f->state == F_WARP) {
                at_shfl |= 1u << l;
                mask = f->shfl_mask;
            }
        }
        if (at_shfl && at_shfl == live_lanes) {
            if ((mask & ~lanes) != 0 || (mask & ~live_lanes) != 0 || mask != at_shfl) {
                hcu_fault(cudaErrorLaunchFailure, "%s: block (%u,%u,%u) warp %u: a shuffle with "
                          "mask 0x%08x reached by lanes 0x%08x (lanes that exist: 0x%08x)",
                          r->kernel, hcu_here.block.x, hcu_here.block.y, hcu_here.block.z, w,
                          mask, at_shfl, lanes);
                return -1;
            }
            for (unsigned l = 0; l < 32 && w * 32 + l < n; l++)
                if (at_shfl & (1u << l))
                    r->fibres[w * 32 + l]->state = F_READY;
            released = 1;
        }
    }
    if (released)
        return 1;
    for (unsigned i = 0; i < n; i++) {
        live += r->fibres[i]->state != F_DONE;
        waiting_sync += r->fibres[i]->state == F_SYNC;
    }
    if (live == 0)
        return 0;
    if (waiting_sync == live) {
        for (unsigned i = 0; i < n; i++)
            if (r->fibres[i]->state == F_SYNC)
                r->fibres[i]->state = F_READY;
        return 1;
    }
    hcu_fault(cudaErrorLaunchFailure, "%s: block (%u,%u,%u): of %u live threads %u wait at "
              "__syncthreads and the others at a shuffle their warp does not complete",
              r->kernel, hcu_here.block.x, hcu_here.block.y, hcu_here.block.z, live,
              waiting_sync);
    return -1;
}

/* Drops the pool after a deadlock: its fibres hold frames that will never
 * return, so none may be entered again. */
static void pool_drop(struct block_run *r)
{
    for (unsigned i = 0; i < r->pooled; i++) {
#ifdef HCU_ASAN
        __asan_unpoison_memory_region(r->fibres[i]->stack, HCU_STACK_BYTES);
#endif
        munmap(r->fibres[i]->map, HCU_STACK_BYTES + HCU_PAGE);
        free(r->fibres[i]);
        r->fibres[i] = NULL;
    }
    r->pooled = 0;
}

/* Every thread of block hcu_here.block. Returns 0, or -1 after a fault. */
static int run_block(struct block_run *r)
{
    for (unsigned i = 0; i < r->threads; i++) {
        r->fibres[i]->state = F_READY;
        r->fibres[i]->shuffles = 0;
    }
    for (;;) {
        for (unsigned i = 0; i < r->threads; i++)
            if (r->fibres[i]->state == F_READY)
                fibre_enter(r, i);
        int rc = release(r);
        if (rc == 0)
            return r->failed ? -1 : 0;
        if (rc < 0) {
            pool_drop(r);
            return -1;
        }
    }
}

/* Blocks first to last of the grid on this host thread. Returns 0, or -1
 * after a fault or when the fibres cannot be made (*e says which). */
static int run_blocks(const char *name, dim3 grid, dim3 block, unsigned threads,
                      void (*body)(void *), void *arg, long first, long last, int *stop,
                      cudaError_t *e)
{
    struct block_run *r = run_get();
    int rc = -1;
    hcu_where saved = hcu_here;
    if (!r) {
        *e = cudaErrorMemoryAllocation;
        return -1;
    }
    if (r->body) {
        hcu_fault(cudaErrorLaunchFailure, "%s launched from inside a kernel", name);
        return -1;
    }
    while (r->pooled < threads)
        if (fibre_new(r) != 0) {
            *e = cudaErrorMemoryAllocation;
            return -1;
        }
    r->threads = threads;
    r->body = body;
    r->arg = arg;
    r->kernel = name;
    r->failed = 0;
    hcu_here.block_dim = block;
    hcu_here.grid_dim = grid;
    for (long b = first; b < last; b++) {
        if (__atomic_load_n(stop, __ATOMIC_RELAXED))
            goto out;
        hcu_here.block.x = (unsigned)(b % grid.x);
        hcu_here.block.y = (unsigned)(b / grid.x % grid.y);
        hcu_here.block.z = (unsigned)(b / grid.x / grid.y);
        if (run_block(r) != 0)
            goto out;
    }
    rc = 0;
out:
    r->body = NULL;
    hcu_here = saved;
    return rc;
}

void hcu_run_grid(const char *name, dim3 grid, dim3 block, struct hcu_stream *stream,
                  void (*body)(void *), void *arg)
{
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    long blocks = (long)grid.x * grid.y * grid.z;
    int stop = 0;
    cudaError_t e = cudaSuccess;
    if (threads == 0 || threads > HCU_MAX_THREADS || block.z > 64 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        hcu_set_last(cudaErrorInvalidConfiguration);
        return;
    }
    if (!hcu_stream_valid(stream)) {
        hcu_set_last(cudaErrorInvalidResourceHandle);
        return;
    }
    if (hcu_sticky() != cudaSuccess)
        return; /* a faulted context runs nothing more */
    /* Each host thread takes a contiguous run of blocks. */
#pragma omp parallel if (blocks > 1)
    {
        int n = omp_get_num_threads(), t = omp_get_thread_num();
        long first = blocks * t / n, last = blocks * (t + 1) / n;
        cudaError_t mine = cudaSuccess;
        if (first < last &&
            run_blocks(name, grid, block, (unsigned)threads, body, arg, first, last, &stop,
                       &mine) != 0) {
            __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
            if (mine != cudaSuccess) {
#pragma omp critical(hcu_grid_error)
                e = mine;
            }
        }
    }
    hcu_set_last(e);
}
