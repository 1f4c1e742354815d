/* cublas.cc - cuBLAS on the host (tests/gpu/host, cublas_v2.h): the two
 * products the CUDA backend calls, through OpenBLAS on fp32 copies of the
 * bf16 operands. */
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "hcu_internal.h"

#include <cblas.h>
#include <set>
#include <mutex>
#include <stdlib.h>
#include <vector>

struct hcu_blas {
    cudaStream_t stream;
};

static std::mutex lock;
static std::set<hcu_blas *> handles;

static int handle_ok(cublasHandle_t h)
{
    std::lock_guard<std::mutex> g(lock);
    return h && handles.count(h);
}

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    hcu_blas *h = new hcu_blas{NULL};
    std::lock_guard<std::mutex> g(lock);
    handles.insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    {
        std::lock_guard<std::mutex> g(lock);
        if (!handle || !handles.erase(handle))
            return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!hcu_stream_valid(stream))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return mode == CUBLAS_DEFAULT_MATH ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

extern "C" const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

/* Elements an operand of `rows` x `cols` (as stored, column-major, leading
 * dimension ld) spans in each of `batch` matrices `stride` apart. */
static size_t extent(int rows, int cols, int ld, long long stride, int batch)
{
    if (rows == 0 || cols == 0 || batch == 0)
        return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(cols - 1) * ld + rows;
}

static size_t type_bytes(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

extern "C" int hcu_bf16_product(int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda,
                                const void *B, int ldb, float *c)
{
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t a_n = extent(ar, ac, lda, 0, 1), b_n = extent(br, bc, ldb, 0, 1);
    if ((a_n && hcu_mem_kind(A, a_n * 2) != HCU_MEM_DEVICE) || (b_n && hcu_mem_kind(B, b_n * 2) != HCU_MEM_DEVICE)) {
        hcu_fault(cudaErrorIllegalAddress, "cuBLAS product (m %d, n %d, k %d, lda %d, ldb %d) reads outside device "
                  "memory (A %zu, B %zu elements from the pointers given)", m, n, k, lda, ldb, a_n, b_n);
        return -1;
    }
    std::vector<float> a(a_n), b(b_n);
    for (size_t i = 0; i < a_n; i++)
        a[i] = __bfloat162float(((const __nv_bfloat16 *)A)[i]);
    for (size_t i = 0; i < b_n; i++)
        b[i] = __bfloat162float(((const __nv_bfloat16 *)B)[i]);
    if (k > 0)
        cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                    a.data(), lda, b.data(), ldb, 0.0f, c, m);
    else
        std::fill(c, c + (size_t)m * n, 0.0f);
    return 0;
}

static cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                    int n, int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
                    long long sa, const void *B, cudaDataType_t bt, int ldb, long long sb,
                    const void *beta, void *C, cudaDataType_t ct, int ldc, long long sc,
                    int batch, cublasComputeType_t compute)
{
    /* A is stored (ar, ac), B (br, bc), column-major */
    int ar = ta == CUBLAS_OP_N ? m : k;
    int br = tb == CUBLAS_OP_N ? k : n;
    size_t c_n;
    float al, be;
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
        m < 0 || n < 0 || k < 0 || batch < 0 || lda < (ar > 1 ? ar : 1) ||
        ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || (ct != CUDA_R_32F && ct != CUDA_R_16BF) ||
        compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    c_n = extent(m, n, ldc, sc, batch);
    if (hcu_mem_kind(C, c_n * type_bytes(ct)) != HCU_MEM_DEVICE) {
        hcu_fault(cudaErrorIllegalAddress, "cuBLAS product (m %d, n %d, k %d, ldc %d, batch %d, stride %lld) "
                  "writes outside device memory (C %zu elements from the pointer given)", m, n, k, ldc, batch, sc,
                  c_n);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (hcu_sticky() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    memcpy(&al, alpha, sizeof al);
    memcpy(&be, beta, sizeof be);
    std::vector<float> c((size_t)m * n);
    for (int p = 0; p < batch; p++) {
        if (hcu_bf16_product(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, al,
                             (const __nv_bfloat16 *)A + (size_t)p * sa, lda, (const __nv_bfloat16 *)B + (size_t)p * sb,
                             ldb, c.data()) != 0)
            return CUBLAS_STATUS_EXECUTION_FAILED;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t at_c = (size_t)p * sc + (size_t)j * ldc + i;
                float v = c[(size_t)j * m + i];
                if (ct == CUDA_R_32F) {
                    float *cf = (float *)C;
                    cf[at_c] = be != 0.0f ? v + be * cf[at_c] : v;
                } else {
                    __nv_bfloat16 *cb = (__nv_bfloat16 *)C;
                    cb[at_c] = __float2bfloat16(be != 0.0f ? v + be * __bfloat162float(cb[at_c]) : v);
                }
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType_t Atype,
                                       int lda, const void *B, cudaDataType_t Btype, int ldb,
                                       const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                beta, C, Ctype, ldc, 0, 1, computeType);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda, long long strideA,
    const void *B, cudaDataType_t Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType_t Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (strideA < 0 || strideB < 0 || strideC < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}
