/* mma.h - the warp matrix functions (nvcuda::wmma) on the host
 * (tests/gpu/host), for 16x16x16 tiles: bf16 fragments a and b, fp32
 * accumulators.  C++ only.
 *
 * On a device a fragment is spread over the warp's 32 lanes in a layout
 * nobody may rely on; here every lane holds the whole tile, so lanes agree
 * by construction.  The product is computed once a warp: the first lane
 * computes it, the others (whose operands are the same bytes) take it
 * from the warp's memo.  A store is warp-collective as on a device: it
 * starts with a warp barrier (a shuffle with oneself), so that no lane
 * stores a tile before every lane has loaded what it read (a load, add
 * and store of one tile is then what it is on a device, not each lane
 * adding in turn); lanes store the same bytes.  What a device
 * requires is checked: a pointer 32-byte aligned and a leading dimension
 * that is a multiple of 16 bytes, else the launch faults with
 * cudaErrorMisalignedAddress. */
#ifndef SHOAL_TESTS_GPU_HOST_MMA_H
#define SHOAL_TESTS_GPU_HOST_MMA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "grid.h"

extern "C" void hcu_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {
    static constexpr bool is_col = false;
};
struct col_major {
    static constexpr bool is_col = true;
};
enum layout_t { mem_row_major, mem_col_major };

/* A whole 16x16 tile, row-major by its logical (row, column). */
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the host emulation has 16x16x16 tiles only");
    T x[16 * 16];
};

static inline void hcu_warp_sync()
{
    (void)hcu_shfl_xor(0xffffffffu, 0, 0, 32);
}

template <class T>
static inline void hcu_mma_check(const T *p, unsigned ldm, const char *what)
{
    if ((uintptr_t)p % 32 || (ldm * sizeof(T)) % 16)
        hcu_fault(cudaErrorMisalignedAddress, "wmma::%s: pointer %p or leading dimension %u (x %zu bytes) "
                  "misaligned (a device needs 32-byte pointers, 16-byte rows)", what, (const void *)p, ldm,
                  sizeof(T));
}

static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v)
{
    for (int i = 0; i < 256; i++)
        f.x[i] = v;
}

/* a (rows i, columns k) and b (rows k, columns j) from memory laid out as
 * Layout says; the fragment keeps (r, c) at x[r * 16 + c]. */
template <class Use, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    hcu_mma_check(p, ldm, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = Layout::is_col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

template <class T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t l)
{
    hcu_mma_check(p, ldm, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

template <class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t l)
{
    hcu_warp_sync();
    hcu_mma_check(p, ldm, "store_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * 16 + c];
}

/* A warp's recent products, operands and result: a ring per warp of a
 * block of at most 1024 threads, slot n for each lane's n-th product (lanes
 * of a warp make the same products in the same order, each running alone
 * up to the next barrier), kept on the heap by each host thread. */
#define HCU_MMA_RING 32 /* products a lane may make between two barriers, and more */

struct hcu_mma_memo {
    int valid;
    __nv_bfloat16 a[256], b[256];
    float c[256], d[256];
};

static inline hcu_mma_memo *hcu_mma_memo_next()
{
    static thread_local hcu_mma_memo *memo;
    static thread_local unsigned *made;   /* products each thread of the block made */
    if (!memo && !(memo = (hcu_mma_memo *)calloc(32 * HCU_MMA_RING, sizeof *memo)))
        hcu_fault(cudaErrorMemoryAllocation, "cannot allocate the warp products' memo");
    if (!made && !(made = (unsigned *)calloc(1024, sizeof *made)))
        hcu_fault(cudaErrorMemoryAllocation, "cannot allocate the warp products' memo");
    if (!memo || !made)
        return NULL;
    unsigned id = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 1024;
    return &memo[id / 32 * HCU_MMA_RING + made[id]++ % HCU_MMA_RING];
}

/* d = a . b + c, products of bf16 widened to fp32, summed in fp32 in k
 * order. */
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
    hcu_mma_memo *m = hcu_mma_memo_next();
    if (m && m->valid && !memcmp(m->a, a.x, sizeof m->a) && !memcmp(m->b, b.x, sizeof m->b) &&
        !memcmp(m->c, c.x, sizeof m->c)) {
        memcpy(d.x, m->d, sizeof d.x);
        return;
    }
    float out[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[i * 16 + j];
            for (int k = 0; k < 16; k++)
                s += __bfloat162float(a.x[i * 16 + k]) * __bfloat162float(b.x[k * 16 + j]);
            out[i * 16 + j] = s;
        }
    if (m) {
        memcpy(m->a, a.x, sizeof m->a);
        memcpy(m->b, b.x, sizeof m->b);
        memcpy(m->c, c.x, sizeof m->c);
        memcpy(m->d, out, sizeof m->d);
        m->valid = 1;
    }
    memcpy(d.x, out, sizeof d.x);
}

} // namespace wmma
} // namespace nvcuda

#endif
