/* cuda_lt.cu - matrix products with an epilogue through cuBLASLt: the bias
 * added, GELU applied (keeping its input for the backward) or GELU's
 * gradient applied, in the product's own kernel instead of a pass of ours
 * over its output (after llm.c's matmul.cuh). */
#include "cuda_layers.cuh"

#include <stdint.h>

static cublasLtEpilogue_t lt_epilogue(enum kcu_epilogue epi)
{
    switch (epi) {
    case KCU_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case KCU_EPI_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case KCU_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    case KCU_EPI_NONE: break;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

/* What cuBLASLt asks of an epilogue's auxiliary matrix: a leading
 * dimension that is a multiple of 8 and 16-byte alignment. */
static int aux_ok(const void *aux, int ld_aux)
{
    return aux && ld_aux % 8 == 0 && (uintptr_t)aux % 16 == 0;
}

int kcu_gemm_epilogue(const struct kcu_ctx *cx, enum kcu_epilogue epi, int trans_a, int trans_b, int M, int N, int K,
                      const bf16 *A, int lda, const bf16 *B, int ldb, float beta, void *D, cudaDataType_t d_type,
                      int ldd, const void *bias, void *aux, int ld_aux, struct kern_err *err)
{
    int rc = -1, found = 0;
    const float alpha = 1.0f;
    int64_t aux_ld = ld_aux;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t e = lt_epilogue(epi);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    cublasStatus_t s;
    uint64_t ws = cx->lt_workspace_bytes;

    if (!cx->lt || ((epi == KCU_EPI_GELU_BIAS || epi == KCU_EPI_DGELU) && !aux_ok(aux, ld_aux))) {
        rc = 1;
        goto out;
    }
    /* Row-major D (M,N) is column-major (N,M): as in kcu_gemm, B goes first
     * and M and N swap. The bias runs along D's column-major rows, i.e.
     * along N, one value per output feature. */
    KCU_TRY_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (epi == KCU_EPI_BIAS || epi == KCU_EPI_GELU_BIAS)
        KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epi == KCU_EPI_GELU_BIAS || epi == KCU_EPI_DGELU) {
        KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof aux));
        KCU_TRY_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                    sizeof aux_ld));
    }
    KCU_TRY_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    KCU_TRY_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    KCU_TRY_BLAS(cublasLtMatrixLayoutCreate(&ld, d_type, N, M, ldd));
    KCU_TRY_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    KCU_TRY_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof ws));
    s = cublasLtMatmulAlgoGetHeuristic(cx->lt, desc, la, lb, ld, ld, pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
        rc = 1; /* no kernel for this one: the caller's own way */
        goto out;
    }
    KCU_TRY_BLAS(s);
    s = cublasLtMatmul(cx->lt, desc, &alpha, B, la, A, lb, &beta, D, ld, D, ld, &h.algo, cx->lt_workspace,
                       cx->lt_workspace_bytes, cx->stream);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) { /* refused before it ran: nothing was written */
        rc = 1;
        goto out;
    }
    KCU_TRY_BLAS(s);
    rc = 0;
out:
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        (void)cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        (void)cublasLtMatrixLayoutDestroy(lb);
    if (la)
        (void)cublasLtMatrixLayoutDestroy(la);
    if (desc)
        (void)cublasLtMatmulDescDestroy(desc);
    return rc;
}
