/* cublaslt.cc - cuBLASLt on the host (tests/gpu/host, cublasLt.h): the
 * product through hcu_bf16_product (cublas.cc), then the epilogue on each
 * element in fp32, then D rounded to its type. */
#include "cublasLt.h"
#include "cuda_bf16.h"
#include "hcu_internal.h"

#include <math.h>
#include <mutex>
#include <set>
#include <stdlib.h>
#include <string.h>
#include <vector>

struct hcu_lt {
    int unused;
};
struct hcu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    uint32_t epilogue;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
struct hcu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct hcu_lt_pref {
    uint64_t workspace;
};

static std::mutex lock;
static std::set<void *> live; /* every handle and descriptor not yet destroyed */

template <typename T> static cublasStatus_t make(T **out, const T &init)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    T *p = new T(init);
    std::lock_guard<std::mutex> g(lock);
    live.insert(p);
    *out = p;
    return CUBLAS_STATUS_SUCCESS;
}

template <typename T> static cublasStatus_t drop(T *p)
{
    {
        std::lock_guard<std::mutex> g(lock);
        if (!p || !live.erase(p))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

static int alive(const void *p)
{
    std::lock_guard<std::mutex> g(lock);
    return p && live.count(const_cast<void *>(p));
}

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    return make(handle, hcu_lt{0});
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    return drop(handle) == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                                   cudaDataType_t scale)
{
    return make(desc, hcu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0});
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    return drop(desc);
}

/* Copies the attribute's value when its size is the one cuBLASLt stores. */
template <typename T> static cublasStatus_t take(T *into, const void *buf, size_t bytes)
{
    if (!buf || bytes != sizeof(T))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(into, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                         cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                         size_t bytes)
{
    if (!alive(desc))
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return take((int32_t *)&desc->compute, buf, bytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return take((int32_t *)&desc->scale, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSA: return take((int32_t *)&desc->ta, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take((int32_t *)&desc->tb, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&desc->epilogue, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&desc->bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(&desc->aux, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(&desc->aux_ld, buf, bytes);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                                     uint64_t rows, uint64_t cols, int64_t ld)
{
    if (ld < 1 || (uint64_t)ld < rows || rows > INT32_MAX || cols > INT32_MAX)
        return CUBLAS_STATUS_INVALID_VALUE;
    return make(layout, hcu_lt_layout{type, rows, cols, ld});
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    return drop(layout);
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    return make(pref, hcu_lt_pref{0});
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return drop(pref);
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                               cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void *buf, size_t bytes)
{
    if (!alive(pref) || attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return CUBLAS_STATUS_INVALID_VALUE;
    return take(&pref->workspace, buf, bytes);
}

static int has(uint32_t epilogue, uint32_t part)
{
    return (epilogue & part) == part;
}

/* What cublasLtMatmul would refuse: CUBLAS_STATUS_SUCCESS when it runs. */
static cublasStatus_t check(const hcu_lt_desc *d, const hcu_lt_layout *a, const hcu_lt_layout *b,
                            const hcu_lt_layout *c, const hcu_lt_layout *dl)
{
    uint64_t m = dl->rows, n = dl->cols, k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
    uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    uint32_t e = d->epilogue;
    if (am != m || bk != k || bn != n || c->rows != m || c->cols != n || c->ld != dl->ld || c->type != dl->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || a->type != CUDA_R_16BF ||
        b->type != CUDA_R_16BF || (dl->type != CUDA_R_32F && dl->type != CUDA_R_16BF))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
        e != CUBLASLT_EPILOGUE_DGELU)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (has(e, CUBLASLT_EPILOGUE_BIAS) && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (has(e, CUBLASLT_EPILOGUE_GELU_AUX) || e == CUBLASLT_EPILOGUE_DGELU) {
        if (!d->aux || d->aux_ld % 8 != 0 || (uint64_t)d->aux_ld < m || (uintptr_t)d->aux % 16 != 0)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                         cublasLtMatmulPreference_t pref, int requested,
                                                         cublasLtMatmulHeuristicResult_t *results, int *returned)
{
    if (!alive(handle) || !alive(desc) || !alive(a) || !alive(b) || !alive(c) || !alive(d) || !alive(pref) ||
        requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    cublasStatus_t s = check(desc, a, b, c, d);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s == CUBLAS_STATUS_INVALID_VALUE ? s : CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

#define HCU_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(HCU_GELU_K * (x + 0.044715f * x * x * x)));
}

static float gelu_grad(float x)
{
    float th = tanhf(HCU_GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * HCU_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

static float load(cudaDataType_t t, const void *p, size_t i)
{
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

static void store(cudaDataType_t t, void *p, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}

static size_t type_bytes(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t adesc, const void *B,
                                         cublasLtMatrixLayout_t bdesc, const void *beta, const void *C,
                                         cublasLtMatrixLayout_t cdesc, void *D, cublasLtMatrixLayout_t ddesc,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                                         cudaStream_t stream)
{
    (void)algo;
    if (!alive(handle) || !alive(desc) || !alive(adesc) || !alive(bdesc) || !alive(cdesc) || !alive(ddesc) ||
        !alpha || !beta || !hcu_stream_valid(stream))
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = check(desc, adesc, bdesc, cdesc, ddesc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (C != D)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the emulation computes in place only */
    int m = (int)ddesc->rows, n = (int)ddesc->cols, k = (int)(desc->ta == CUBLAS_OP_N ? adesc->cols : adesc->rows);
    size_t ld = (size_t)ddesc->ld, d_n = m && n ? (size_t)(n - 1) * ld + m : 0;
    uint32_t e = desc->epilogue;
    cudaDataType_t t = ddesc->type;
    size_t aux_n = m && n ? (size_t)(n - 1) * (size_t)desc->aux_ld + m : 0;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (hcu_mem_kind(D, d_n * type_bytes(t)) != HCU_MEM_DEVICE ||
        (has(e, CUBLASLT_EPILOGUE_BIAS) && hcu_mem_kind(desc->bias, (size_t)m * type_bytes(t)) != HCU_MEM_DEVICE) ||
        (desc->aux && hcu_mem_kind(desc->aux, aux_n * type_bytes(t)) != HCU_MEM_DEVICE) ||
        (workspace_bytes && hcu_mem_kind(workspace, workspace_bytes) != HCU_MEM_DEVICE)) {
        hcu_fault(cudaErrorIllegalAddress, "cuBLASLt product (m %d, n %d, k %d, ldd %zu, epilogue %u) reaches "
                  "outside device memory (D, bias, aux or workspace)", m, n, k, ld, e);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (hcu_sticky() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float al, be;
    memcpy(&al, alpha, sizeof al);
    memcpy(&be, beta, sizeof be);
    std::vector<float> c((size_t)m * n);
    if (hcu_bf16_product(desc->ta == CUBLAS_OP_T, desc->tb == CUBLAS_OP_T, m, n, k, al, A,
                         (int)adesc->ld, B, (int)bdesc->ld, c.data()) != 0)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            size_t at = (size_t)j * ld + i, at_aux = (size_t)j * (size_t)desc->aux_ld + i;
            float v = c[(size_t)j * m + i] + (be != 0.0f ? be * load(t, D, at) : 0.0f);
            if (has(e, CUBLASLT_EPILOGUE_BIAS))
                v += load(t, desc->bias, (size_t)i);
            if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                store(t, desc->aux, at_aux, v);
                v = gelu(v);
            } else if (e == CUBLASLT_EPILOGUE_DGELU) {
                v *= gelu_grad(load(t, desc->aux, at_aux));
            }
            store(t, D, at, v);
        }
    return CUBLAS_STATUS_SUCCESS;
}
