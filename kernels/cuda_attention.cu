/* cuda_attention.cu - the CUDA backend's causal attention (cuda_layers.cuh):
 * q, k and v split into heads (rotated and repeated for grouped-query
 * attention where asked), flash attention forward and backward (no (T,T)
 * matrix is ever stored), and the merge back; the CPU's
 * kern_cpu_attention_* and kern_cpu_rope_*. */
#include "cuda_reduce.cuh"

#include <mma.h>

using namespace nvcuda;

/* Offset of element i of a (B,NH,T,hs) tensor in a (B,T,ld) tensor whose row
 * holds head h at columns [h*hs, h*hs+hs). */
__device__ static size_t head_to_token(size_t i, int T, int NH, int hs, int ld)
{
    size_t d = i % hs, r = i / hs;
    size_t t = r % T;
    r /= T;
    size_t h = r % NH, b = r / NH;
    return (b * T + t) * ld + h * hs + d;
}

/* Element d of a head's row x (hs values), rotated by the angle table of
 * position t (cos, sin (T, hs/2)) as rotate_half pairs d with d +- hs/2;
 * sign +1 rotates, -1 rotates back.  Without tables, x[d]. */
__device__ static float rope_at(const float *x, int d, int hs, int t, const float *cos_t, const float *sin_t,
                                float sign)
{
    if (!cos_t)
        return x[d];
    int half = hs / 2, i = d % half;
    float c = cos_t[(size_t)t * half + i], s = sign * sin_t[(size_t)t * half + i];
    return d < half ? x[d] * c - x[d + half] * s : x[d] * c + x[d - half] * s;
}

/* q, k, v (B,NH,T,hs) bf16 <- qkv (B,T,C+2KV) fp32: the CPU reads them in
 * place from qkv; here they are split into heads for batched products, k
 * and v repeated for the query heads of their group (kv head h / (NH /
 * KVH)), q and k rotated first when tables are given (the CPU's
 * kern_cpu_rope_forward). */
__global__ static void permute_qkv_kernel(bf16 *q, bf16 *k, bf16 *v, const float *qkv, int T, int NH,
                                          int KVH, int hs, const float *cos_t, const float *sin_t, size_t n)
{
    int C = NH * hs, KV = KVH * hs, W = C + 2 * KV, group = NH / KVH;
    KCU_FOR(i, n) {
        size_t d = i % hs, r = i / hs;
        int t = (int)(r % T);
        r /= T;
        size_t h = r % NH, b = r / NH, g = h / group;
        const float *row = qkv + (b * T + t) * W;
        q[i] = __float2bfloat16(rope_at(row + h * hs, (int)d, hs, t, cos_t, sin_t, 1.0f));
        k[i] = __float2bfloat16(rope_at(row + C + g * hs, (int)d, hs, t, cos_t, sin_t, 1.0f));
        v[i] = __float2bfloat16(row[C + KV + g * hs + d]);
    }
}

/* out (B,T,C) bf16 <- y (B,NH,T,hs) bf16 */
__global__ static void unpermute_kernel(bf16 *out, const bf16 *y, int T, int NH, int hs,
                                        size_t n)
{
    KCU_FOR(i, n)
        out[head_to_token(i, T, NH, hs, NH * hs)] = y[i];
}

/* dy (B,NH,T,hs) bf16 <- dout (B,T,C) fp32 */
__global__ static void permute_kernel(bf16 *dy, const float *dout, int T, int NH, int hs,
                                      size_t n)
{
    KCU_FOR(i, n)
        dy[i] = __float2bfloat16(dout[head_to_token(i, T, NH, hs, NH * hs)]);
}

/* dqkv (B,T,C+2KV) fp32 and bf16 <- dq, dk, dv (B,NH,T,hs) fp32: one thread
 * per element of dqkv; dk and dv of a kv head sum its group's query heads
 * in order, and dq and dk are rotated back when tables are given (the
 * CPU's kern_cpu_rope_backward). */
__global__ static void unpermute_qkv_kernel(float *dqkv, bf16 *dqkv_bf, const float *dq, const float *dk,
                                            const float *dv, int T, int NH, int KVH, int hs,
                                            const float *cos_t, const float *sin_t, size_t n)
{
    int C = NH * hs, KV = KVH * hs, W = C + 2 * KV, group = NH / KVH;
    KCU_FOR(i, n) {
        size_t col = i % W, bt = i / W, b = bt / T;
        int t = (int)(bt % T), part = col < (size_t)C ? 0 : col < (size_t)(C + KV) ? 1 : 2;
        size_t in = part == 0 ? col : part == 1 ? col - C : col - C - KV;   /* column within the part */
        int head = (int)(in / hs), d = (int)(in % hs);
        float x[2] = {0.0f, 0.0f};   /* the element and its rotation pair */
        const float *src = part == 0 ? dq : part == 1 ? dk : dv;
        int from = part == 0 ? head : head * group, to = part == 0 ? head + 1 : (head + 1) * group;
        int half = hs / 2, pair = d < half ? d + half : d - half;
        for (int h = from; h < to; h++) {
            const float *r = src + (((size_t)b * NH + h) * T + t) * hs;
            x[0] += r[d];
            x[1] += r[pair];
        }
        float val = x[0];
        if (part < 2 && cos_t) {   /* rotated back: the transpose of the rotation */
            int j = d % half;
            float c = cos_t[(size_t)t * half + j], s = sin_t[(size_t)t * half + j];
            val = d < half ? x[0] * c + x[1] * s : x[0] * c - x[1] * s;
        }
        dqkv[i] = val;
        dqkv_bf[i] = __float2bfloat16(val);
    }
}

/* ---- flash attention: the causal softmax of scale * q.k^T times v, tile by
 * tile, without the (T,T) matrix (Dao et al., FlashAttention-2): a block
 * of FA_THREADS threads takes FA_ROWS(D) rows of one (b,h) against the key
 * tiles at or before them (those within a sliding window, when the model
 * has one).  The products run on tensor cores (wmma, 16x16x16
 * bf16 tiles, fp32 sums; tests/gpu/host/mma.h on the host); each row's
 * running maximum and sum (online softmax) live with the FA_THREADS /
 * FA_ROWS(D) consecutive lanes that share the row.  The forward keeps each
 * row's log-sum-exp for the backward, which recomputes the probabilities
 * from it.  D is the largest head size an instance takes (64, 128 or 256),
 * heads padded with zeros to a multiple of 16; all of a block's tiles are
 * carved from one __shared__ buffer of at most 48 KiB. */
#define FA_THREADS 128
#define FA_WARPS (FA_THREADS / 32)
#define FA_ROWS(D) ((D) <= 128 ? 32 : 16)
#define FA_HS_MAX 256 /* the largest head size the kernels take */
#define FA_ACC_MAX 4  /* output tiles of 16x16 a warp holds: (ROWS/16) * (D/16) / FA_WARPS at most */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa_a_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> fa_a_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fa_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fa_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> fa_acc;

/* Carves n elements of T from the block's shared buffer at *used (bytes,
 * kept a multiple of 128 so that every tile starts 32-byte aligned). */
template <class T>
__device__ static T *fa_carve(unsigned char *raw, size_t *used, size_t n)
{
    T *p = (T *)(raw + *used);
    *used += (n * sizeof(T) + 127) / 128 * 128;
    return p;
}

/* Copies ROWS rows of hs values starting at row r0 of a (T,hs) matrix into
 * tile (ROWS, D), zeros past T and past hs. */
template <int D>
__device__ static void fa_load(bf16 *tile, const bf16 *x, int r0, int T, int hs)
{
    for (int i = threadIdx.x; i < FA_ROWS(D) * D; i += FA_THREADS) {
        int r = i / D, d = i % D;
        tile[i] = r0 + r < T && d < hs ? x[(size_t)(r0 + r) * hs + d] : __float2bfloat16(0.0f);
    }
}

/* s (ROWS, ROWS) fp32 = a (ROWS, hs16) . b (ROWS, hs16)^T, both tiles of
 * leading dimension D: q.k^T or dy.v^T. */
template <int D>
__device__ static void fa_scores(float *s, const bf16 *a, const bf16 *b, int hs16)
{
    constexpr int R = FA_ROWS(D), RT = R / 16;
    for (int t = threadIdx.x / 32; t < RT * RT; t += FA_WARPS) {
        int ti = t / RT, tj = t % RT;
        fa_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < hs16; kk += 16) {
            fa_a_row fa;
            fa_b_col fb;
            wmma::load_matrix_sync(fa, a + ti * 16 * D + kk, D);
            wmma::load_matrix_sync(fb, b + tj * 16 * D + kk, D);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s + ti * 16 * R + tj * 16, acc, R, wmma::mem_row_major);
    }
}

/* acc += (the rows of output tile `tile` of (ROWS, hs16)) of p . x, with p
 * (ROWS, ROWS) bf16 taken as it is or transposed (TRANS: the tile is
 * stored [query][key] and the product wants keys as rows) and x (ROWS,
 * hs16) of leading dimension D. */
template <int D, bool TRANS>
__device__ static void fa_accumulate(fa_acc &acc, int tile, const bf16 *p, const bf16 *x, int hs16)
{
    constexpr int R = FA_ROWS(D);
    int ti = tile / (hs16 / 16), tj = tile % (hs16 / 16);
    for (int kk = 0; kk < R; kk += 16) {
        fa_b_row fb;
        wmma::load_matrix_sync(fb, x + kk * D + tj * 16, D);
        if (TRANS) {
            fa_a_col fa;
            wmma::load_matrix_sync(fa, p + kk * R + ti * 16, R);
            wmma::mma_sync(acc, fa, fb, acc);
        } else {
            fa_a_row fa;
            wmma::load_matrix_sync(fa, p + ti * 16 * R + kk, R);
            wmma::mma_sync(acc, fa, fb, acc);
        }
    }
}

/* Writes the warp's accumulated output tiles (ROWS, hs16), times `scale`,
 * as rows r0.. of a (T,hs) fp32 matrix: through stage (ROWS, D) fp32 in
 * shared memory, as the tiles are padded past hs and T. */
template <int D>
__device__ static void fa_write(float *out, fa_acc *acc, float *stage, int r0, int T, int hs, int hs16, float scale)
{
    constexpr int R = FA_ROWS(D);
    int n = 0;
    __syncthreads();   /* stage is free */
    for (int t = threadIdx.x / 32; t < (R / 16) * (hs16 / 16); t += FA_WARPS, n++)
        wmma::store_matrix_sync(stage + (t / (hs16 / 16)) * 16 * D + (t % (hs16 / 16)) * 16, acc[n], D,
                                wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < R * D; i += FA_THREADS) {
        int r = i / D, d = i % D;
        if (r0 + r < T && d < hs)
            out[(size_t)(r0 + r) * hs + d] = scale * stage[i];
    }
}

/* The sum and the maximum over the lanes that share a row. */
template <int D>
__device__ static float fa_row_sum(float v)
{
    for (int o = 1; o < FA_THREADS / FA_ROWS(D); o <<= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int D>
__device__ static float fa_row_max(float v)
{
    for (int o = 1; o < FA_THREADS / FA_ROWS(D); o <<= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Shared bytes of a kernel's tiles: bf16 ones of (ROWS, D) and (ROWS,
 * ROWS), fp32 ones of (ROWS, ROWS) and (ROWS, D), vectors of ROWS. */
#define FA_SHARED(D, nbd, nbr, nfr, nfd, nvec)                                                              \
    (((nbd) * FA_ROWS(D) * (D) * 2 + 127) / 128 * 128 + (nbr) * ((FA_ROWS(D) * FA_ROWS(D) * 2 + 127) / 128 * 128) + \
     (nfr) * ((FA_ROWS(D) * FA_ROWS(D) * 4 + 127) / 128 * 128) + (nfd) * ((FA_ROWS(D) * (D) * 4 + 127) / 128 * 128) + \
     (nvec) * ((FA_ROWS(D) * 4 + 127) / 128 * 128))

#define FA_BACK_SHARED(D) FA_SHARED(D, 4, 2, 2, 0, 2)
#define FA_FORWARD_SHARED(D) FA_SHARED(D, 3, 1, 1, 1, 0)
#define FA_MAX(a, b) ((a) > (b) ? (a) : (b))

/* The shared bytes of the kernels for head sizes up to D: what the largest
 * of the three needs (at most 48 KiB). */
#define FA_SHARED_BYTES(D) FA_MAX(FA_FORWARD_SHARED(D), FA_BACK_SHARED(D))

/* The sliding window: W >= 1 positions a row sees, itself included (T or
 * more: all before it).  Row t sees key j when t - W < j <= t; a tile of
 * rows from i0 sees no key before i0 - W + 1, so its first key tile is
 * fa_first_key's; a tile of keys from j0 is seen by no row past j0 + R - 2
 * + W, so its last query tile starts before fa_end_query's. */
__device__ static inline int fa_sees(int t, int j, int W)
{
    return j <= t && j > t - W;
}

template <int D>
__device__ static inline int fa_first_key(int i0, int W)
{
    int j = i0 - W + 1;
    return j > 0 ? j / FA_ROWS(D) * FA_ROWS(D) : 0;
}

template <int D>
__device__ static inline int fa_end_query(int j0, int T, int W)
{
    long long end = (long long)j0 + FA_ROWS(D) - 1 + W;   /* past the last row that sees the tile */
    return end < T ? (int)end : T;
}

/* y (B*NH,T,hs) bf16 and lse (B*NH,T) fp32 <- q, k, v (B*NH,T,hs) bf16;
 * grid (B*NH, tiles of T). */
template <int D>
__global__ static void flash_forward_kernel(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T,
                                            int hs, float scale, int W)
{
    constexpr int R = FA_ROWS(D), TPR = FA_THREADS / R;
    KCU_SHARED_BUFFER(raw, FA_SHARED_BYTES(D));
    size_t used = 0, base = (size_t)blockIdx.x * T * hs;
    bf16 *qs = fa_carve<bf16>(raw, &used, R * D), *ks = fa_carve<bf16>(raw, &used, R * D);
    bf16 *vs = fa_carve<bf16>(raw, &used, R * D), *ps = fa_carve<bf16>(raw, &used, R * R);
    float *ss = fa_carve<float>(raw, &used, R * R), *os = fa_carve<float>(raw, &used, R * D);
    int i0 = blockIdx.y * R, r = threadIdx.x / TPR, lane = threadIdx.x % TPR, t = i0 + r;
    int hs16 = (hs + 15) / 16 * 16, ot = (R / 16) * (hs16 / 16);   /* output tiles */
    float m = -INFINITY, l = 0.0f;
    fa_load<D>(qs, q + base, i0, T, hs);
    for (int i = threadIdx.x; i < R * D; i += FA_THREADS)
        os[i] = 0.0f;
    for (int j0 = fa_first_key<D>(i0, W); j0 <= i0; j0 += R) {
        __syncthreads();   /* the previous tile is no longer read */
        fa_load<D>(ks, k + base, j0, T, hs);
        fa_load<D>(vs, v + base, j0, T, hs);
        __syncthreads();
        fa_scores<D>(ss, qs, ks, hs16);
        __syncthreads();
        float sc[R / TPR], mx = -INFINITY;
        for (int c = 0; c < R / TPR; c++) {
            int col = lane + c * TPR;
            sc[c] = t < T && fa_sees(t, j0 + col, W) ? scale * ss[r * R + col] : -INFINITY;
            mx = fmaxf(mx, sc[c]);
        }
        float m_new = fmaxf(m, fa_row_max<D>(mx)), sum = 0.0f;
        float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
        for (int c = 0; c < R / TPR; c++) {
            float p = sc[c] == -INFINITY ? 0.0f : expf(sc[c] - m_new);
            ps[r * R + lane + c * TPR] = __float2bfloat16(p);
            sum += p;
        }
        l = l * alpha + fa_row_sum<D>(sum);
        m = m_new;
        for (int d = lane; d < hs16; d += TPR)
            os[r * D + d] *= alpha;
        __syncthreads();   /* ps and the rescaled os are whole */
        for (int tile = threadIdx.x / 32; tile < ot; tile += FA_WARPS) {
            float *o = os + (tile / (hs16 / 16)) * 16 * D + (tile % (hs16 / 16)) * 16;
            fa_acc acc;
            wmma::load_matrix_sync(acc, o, D, wmma::mem_row_major);
            fa_accumulate<D, false>(acc, tile, ps, vs, hs16);
            wmma::store_matrix_sync(o, acc, D, wmma::mem_row_major);
        }
    }
    __syncthreads();
    if (t >= T)
        return;
    for (int d = lane; d < hs; d += TPR)
        y[base + (size_t)t * hs + d] = __float2bfloat16(os[r * D + d] / l);
    if (lane == 0)
        lse[(size_t)blockIdx.x * T + t] = m + logf(l);
}

/* delta (B*NH,T) = the dot product of each row of dy (B*NH,T,hs) bf16 and
 * of the forward's output, out (B,T,C) bf16: sum_s P_ts dP_ts, which the
 * softmax backward subtracts. */
__global__ static void flash_delta_kernel(float *delta, const bf16 *dy, const bf16 *out, int T, int NH, int hs,
                                          size_t rows)
{
    KCU_FOR(i, rows) {
        size_t t = i % T, bh = i / T, b = bh / NH, h = bh % NH;
        const bf16 *g = dy + i * hs, *o = out + (b * T + t) * NH * hs + h * hs;
        float s = 0.0f;
        for (int d = 0; d < hs; d++)
            s += __bfloat162float(g[d]) * __bfloat162float(o[d]);
        delta[i] = s;
    }
}

/* The tiles both backward passes use: q, dy, k, v (ROWS, D) bf16; the
 * scores and dy.v^T (ROWS, ROWS) fp32; P and dS (ROWS, ROWS) bf16; the
 * query rows' lse and delta. */
struct fa_back {
    bf16 *qs, *dys, *ks, *vs, *ps, *dss;
    float *ss, *dps, *lses, *deltas;
};

template <int D>
__device__ static struct fa_back fa_back_carve(unsigned char *raw)
{
    constexpr int R = FA_ROWS(D);
    size_t used = 0;
    struct fa_back b;
    b.qs = fa_carve<bf16>(raw, &used, R * D);
    b.dys = fa_carve<bf16>(raw, &used, R * D);
    b.ks = fa_carve<bf16>(raw, &used, R * D);
    b.vs = fa_carve<bf16>(raw, &used, R * D);
    b.ps = fa_carve<bf16>(raw, &used, R * R);
    b.dss = fa_carve<bf16>(raw, &used, R * R);
    b.ss = fa_carve<float>(raw, &used, R * R);
    b.dps = fa_carve<float>(raw, &used, R * R);
    b.lses = fa_carve<float>(raw, &used, R);
    b.deltas = fa_carve<float>(raw, &used, R);
    return b;
}

/* Loads the query tile i0 (q, dy and their rows' lse and delta). */
template <int D>
__device__ static void fa_load_queries(const struct fa_back *s, const bf16 *q, const bf16 *dy, const float *lse,
                                       const float *delta, int i0, int T, int hs)
{
    fa_load<D>(s->qs, q, i0, T, hs);
    fa_load<D>(s->dys, dy, i0, T, hs);
    for (int r = threadIdx.x; r < FA_ROWS(D); r += FA_THREADS) {
        s->lses[r] = i0 + r < T ? lse[i0 + r] : 0.0f;
        s->deltas[r] = i0 + r < T ? delta[i0 + r] : 0.0f;
    }
}

/* With the query tile i0 and the key tile j0 loaded: P = exp(scale * q.k^T
 * - lse) and dS = P * (dy.v^T - delta), zero where the causal mask (or
 * the window, W) hides a pair, into s->ps and s->dss (bf16). */
template <int D>
__device__ static void fa_dscores(const struct fa_back *s, int i0, int j0, int T, int hs16, float scale, int W)
{
    constexpr int R = FA_ROWS(D), TPR = FA_THREADS / R;
    int r = threadIdx.x / TPR, lane = threadIdx.x % TPR, t = i0 + r;
    fa_scores<D>(s->ss, s->qs, s->ks, hs16);
    fa_scores<D>(s->dps, s->dys, s->vs, hs16);
    __syncthreads();
    for (int c = 0; c < R / TPR; c++) {
        int col = lane + c * TPR;
        float p = 0.0f, ds = 0.0f;
        if (t < T && fa_sees(t, j0 + col, W)) {
            p = expf(scale * s->ss[r * R + col] - s->lses[r]);
            ds = p * (s->dps[r * R + col] - s->deltas[r]);
        }
        s->ps[r * R + col] = __float2bfloat16(p);
        s->dss[r * R + col] = __float2bfloat16(ds);
    }
    __syncthreads();
}

/* dk, dv (B*NH,T,hs) fp32 of the key tile blockIdx.y, summed over the query
 * tiles at or after it that see it: dv = P^T dy, dk = scale * dS^T q; grid
 * (B*NH, tiles of T). */
template <int D>
__global__ static void flash_backward_kv_kernel(float *dk, float *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                                                const bf16 *dy, const float *lse, const float *delta, int T, int hs,
                                                float scale, int W)
{
    constexpr int R = FA_ROWS(D);
    KCU_SHARED_BUFFER(raw, FA_SHARED_BYTES(D));
    struct fa_back s = fa_back_carve<D>(raw);
    size_t base = (size_t)blockIdx.x * T * hs;
    int j0 = blockIdx.y * R, hs16 = (hs + 15) / 16 * 16, ot = (R / 16) * (hs16 / 16);
    fa_acc dka[FA_ACC_MAX], dva[FA_ACC_MAX];
    for (int n = 0; n < FA_ACC_MAX; n++) {
        wmma::fill_fragment(dka[n], 0.0f);
        wmma::fill_fragment(dva[n], 0.0f);
    }
    fa_load<D>(s.ks, k + base, j0, T, hs);
    fa_load<D>(s.vs, v + base, j0, T, hs);
    for (int i0 = j0, end = fa_end_query<D>(j0, T, W); i0 < end; i0 += R) {
        __syncthreads();
        fa_load_queries<D>(&s, q + base, dy + base, lse + (size_t)blockIdx.x * T, delta + (size_t)blockIdx.x * T, i0,
                           T, hs);
        __syncthreads();
        fa_dscores<D>(&s, i0, j0, T, hs16, scale, W);
        int n = 0;
        for (int tile = threadIdx.x / 32; tile < ot; tile += FA_WARPS, n++) {
            fa_accumulate<D, true>(dva[n], tile, s.ps, s.dys, hs16);
            fa_accumulate<D, true>(dka[n], tile, s.dss, s.qs, hs16);
        }
    }
    /* q and dy (2 x ROWS x D bf16) are done: the stage of ROWS x D fp32 */
    fa_write<D>(dk + base, dka, (float *)s.qs, j0, T, hs, hs16, scale);
    fa_write<D>(dv + base, dva, (float *)s.qs, j0, T, hs, hs16, 1.0f);
}

/* dq (B*NH,T,hs) fp32 of the query tile blockIdx.y, summed over the key
 * tiles at or before it that it sees: dq = scale * dS k (a pass of its own,
 * so that no two blocks add into one row: the sums come out the same every
 * run). */
template <int D>
__global__ static void flash_backward_q_kernel(float *dq, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dy,
                                               const float *lse, const float *delta, int T, int hs, float scale, int W)
{
    constexpr int R = FA_ROWS(D);
    KCU_SHARED_BUFFER(raw, FA_SHARED_BYTES(D));
    struct fa_back s = fa_back_carve<D>(raw);
    size_t base = (size_t)blockIdx.x * T * hs;
    int i0 = blockIdx.y * R, hs16 = (hs + 15) / 16 * 16, ot = (R / 16) * (hs16 / 16);
    fa_acc dqa[FA_ACC_MAX];
    for (int n = 0; n < FA_ACC_MAX; n++)
        wmma::fill_fragment(dqa[n], 0.0f);
    fa_load_queries<D>(&s, q + base, dy + base, lse + (size_t)blockIdx.x * T, delta + (size_t)blockIdx.x * T, i0, T,
                       hs);
    for (int j0 = fa_first_key<D>(i0, W); j0 <= i0; j0 += R) {
        __syncthreads();
        fa_load<D>(s.ks, k + base, j0, T, hs);
        fa_load<D>(s.vs, v + base, j0, T, hs);
        __syncthreads();
        fa_dscores<D>(&s, i0, j0, T, hs16, scale, W);
        int n = 0;
        for (int tile = threadIdx.x / 32; tile < ot; tile += FA_WARPS, n++)
            fa_accumulate<D, false>(dqa[n], tile, s.dss, s.ks, hs16);
    }
    /* k and v are done: the stage */
    fa_write<D>(dq + base, dqa, (float *)s.ks, i0, T, hs, hs16, scale);
}

/* The three passes for head size hs <= D. */
template <int D>
static int flash_forward(const struct kcu_ctx *cx, bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                         int BH, int T, int hs, float scale, int W, struct kern_err *err)
{
    int rc = -1;
    dim3 grid((unsigned)BH, (unsigned)((T + FA_ROWS(D) - 1) / FA_ROWS(D)));
    void (*kernel)(bf16 *, float *, const bf16 *, const bf16 *, const bf16 *, int, int, float, int) =
        flash_forward_kernel<D>;
    KCU_LAUNCH(kernel, grid, FA_THREADS, cx->stream)(y, lse, q, k, v, T, hs, scale, W);
    KCU_TRY_LAUNCH("flash_forward_kernel");
    rc = 0;
out:
    return rc;
}

template <int D>
static int flash_backward(const struct kcu_ctx *cx, float *dq, float *dk, float *dv, const bf16 *q, const bf16 *k,
                          const bf16 *v, const bf16 *dy, const float *lse, const float *delta, int BH, int T, int hs,
                          float scale, int W, struct kern_err *err)
{
    int rc = -1;
    dim3 grid((unsigned)BH, (unsigned)((T + FA_ROWS(D) - 1) / FA_ROWS(D)));
    void (*kv)(float *, float *, const bf16 *, const bf16 *, const bf16 *, const bf16 *, const float *, const float *,
               int, int, float, int) = flash_backward_kv_kernel<D>;
    void (*qk)(float *, const bf16 *, const bf16 *, const bf16 *, const bf16 *, const float *, const float *, int, int,
               float, int) = flash_backward_q_kernel<D>;
    KCU_LAUNCH(kv, grid, FA_THREADS, cx->stream)(dk, dv, q, k, v, dy, lse, delta, T, hs, scale, W);
    KCU_TRY_LAUNCH("flash_backward_kv_kernel");
    KCU_LAUNCH(qk, grid, FA_THREADS, cx->stream)(dq, q, k, v, dy, lse, delta, T, hs, scale, W);
    KCU_TRY_LAUNCH("flash_backward_q_kernel");
    rc = 0;
out:
    return rc;
}

int kcu_attention_head_size_ok(int hs)
{
    return hs >= 1 && hs <= FA_HS_MAX;
}

int kcu_attention_forward(const struct kcu_ctx *cx, bf16 *out, bf16 *qkvr, float *lse, const float *qkv, bf16 *y,
                          int B, int T, int C, int NH, int KVH, const float *cos_t, const float *sin_t, int window,
                          struct kern_err *err)
{
    int rc = -1;
    int hs = C / NH, BH = B * NH, W = window > 0 && window < T ? window : T;   /* positions a row sees */
    size_t n = (size_t)B * T * C;                     /* elements of each of q, k, v */
    bf16 *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n; /* (B,NH,T,hs) each */
    float scale = 1.0f / sqrtf((float)hs);
    unsigned blocks = kcu_blocks(n, KCU_THREADS);

    if (!kcu_attention_head_size_ok(hs)) {
        kern_fail(err, "the CUDA backend's attention takes head sizes up to %d, not %d", FA_HS_MAX, hs);
        goto out;
    }
    KCU_LAUNCH(permute_qkv_kernel, blocks, KCU_THREADS, cx->stream)(q, k, v, qkv, T, NH, KVH, hs, cos_t, sin_t,
                                                                     n);
    KCU_TRY_LAUNCH("permute_qkv_kernel");
    KCU_TRY_OK(hs <= 64    ? flash_forward<64>(cx, y, lse, q, k, v, BH, T, hs, scale, W, err)
               : hs <= 128 ? flash_forward<128>(cx, y, lse, q, k, v, BH, T, hs, scale, W, err)
                           : flash_forward<256>(cx, y, lse, q, k, v, BH, T, hs, scale, W, err));
    KCU_LAUNCH(unpermute_kernel, blocks, KCU_THREADS, cx->stream)(out, y, T, NH, hs, n);
    KCU_TRY_LAUNCH("unpermute_kernel");
    rc = 0;
out:
    return rc;
}

int kcu_attention_backward(const struct kcu_ctx *cx, float *dqkv, bf16 *dqkv_bf, const float *dout, const bf16 *out,
                           const bf16 *qkvr, const float *lse, float *delta, bf16 *dy, float *dqkvr, int B, int T,
                           int C, int NH, int KVH, const float *cos_t, const float *sin_t, int window,
                           struct kern_err *err)
{
    int rc = -1;
    int hs = C / NH, BH = B * NH, W = window > 0 && window < T ? window : T;
    size_t n = (size_t)B * T * C;
    const bf16 *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n; /* (B,NH,T,hs) each */
    float *dq = dqkvr, *dk = dqkvr + n, *dv = dqkvr + 2 * n; /* (B,NH,T,hs) each */
    float scale = 1.0f / sqrtf((float)hs);
    unsigned blocks = kcu_blocks(n, KCU_THREADS);
    size_t rows = (size_t)BH * T, n_out = (size_t)B * T * (C + 2 * (size_t)KVH * hs);   /* elements of dqkv */

    if (!kcu_attention_head_size_ok(hs)) {
        kern_fail(err, "the CUDA backend's attention takes head sizes up to %d, not %d", FA_HS_MAX, hs);
        goto out;
    }
    KCU_LAUNCH(permute_kernel, blocks, KCU_THREADS, cx->stream)(dy, dout, T, NH, hs, n);
    KCU_TRY_LAUNCH("permute_kernel");
    KCU_LAUNCH(flash_delta_kernel, kcu_blocks(rows, KCU_THREADS), KCU_THREADS, cx->stream)(delta, dy, out, T, NH, hs,
                                                                                          rows);
    KCU_TRY_LAUNCH("flash_delta_kernel");
    KCU_TRY_OK(hs <= 64    ? flash_backward<64>(cx, dq, dk, dv, q, k, v, dy, lse, delta, BH, T, hs, scale, W, err)
               : hs <= 128 ? flash_backward<128>(cx, dq, dk, dv, q, k, v, dy, lse, delta, BH, T, hs, scale, W, err)
                           : flash_backward<256>(cx, dq, dk, dv, q, k, v, dy, lse, delta, BH, T, hs, scale, W,
                                                 err));
    KCU_LAUNCH(unpermute_qkv_kernel, kcu_blocks(n_out, KCU_THREADS), KCU_THREADS, cx->stream)(
        dqkv, dqkv_bf, dq, dk, dv, T, NH, KVH, hs, cos_t, sin_t, n_out);
    KCU_TRY_LAUNCH("unpermute_qkv_kernel");
    rc = 0;
out:
    return rc;
}
