/* cuda_layers.cuh - the CUDA backend's layers, one forward and one backward
 * launcher per layer of cpu_layers.h, with the same argument meanings. Every
 * launcher queues its work on cx->stream and returns 0, or -1 with a sentence
 * in err when a launch or a cuBLAS call is refused; faults inside a kernel
 * show up at the caller's next synchronisation.
 *
 * Precision: fp32 for the residual stream, statistics, pre-activations and
 * every gradient a later layer reads; bf16 (`bf16`) for whatever a matrix
 * product reads; fp32 accumulation in every kernel and product.
 *
 *   encoder    inp (B,T) ids, wte (V,C), wpe (T_ctx,C) fp32 -> out (B,T,C) fp32
 *   layernorm  inp (N,C) fp32, weight (C), bias (C) -> out (N,C) bf16,
 *              mean (N), rstd (N) fp32
 *   matmul     inp (N,IC) bf16, weight (OC,IC) bf16, bias (OC) fp32 or NULL
 *              -> out (N,OC) fp32, rows ldo apart (the head's: a padded vocab)
 *   attention  qkv (B,T,C+2KV) fp32 -> out (B,T,C) bf16; keeps q,k,v per
 *              head (3,B,NH,T,hs), k and v repeated over their group of
 *              query heads (KVH kv heads; gpt2: KVH = NH, qkv (B,T,3C)), q
 *              and k rotated when rope tables (T,hs/2) are given, and
 *              each row's log-sum-exp (B,NH,T) fp32 (flash attention)
 *   rmsnorm    inp (N,C) fp32, weight (C) -> out (N,C) bf16, rstd (N) fp32
 *   swiglu     gu (N,2F) fp32 = [gate | up] -> out (N,F) bf16
 *   matmul_gelu  inp (N,IC) bf16 -> pre (N,OC) bf16 (+ bias), out (N,OC)
 *              bf16 = gelu(pre), tanh approximation, in cuBLASLt's epilogue
 *   residual   a (n), b (n) fp32 -> out (n) fp32; fused with the norm that
 *              follows it (residual_layernorm, residual_rmsnorm)
 *   crossentropy logits (N,V) fp32 -> probs (N,V) fp32 in place, losses (N);
 *              backward: dlogits (N,V) bf16 = (probs - onehot) * dloss; the
 *              rows of all three are ld >= V apart (kcu_padded_vocab)
 *
 * Where the CPU layer accumulates (+=) into an input gradient that every
 * caller has just zeroed (matmul dinp, gelu dinp, attention dqkv), the
 * launcher here overwrites it instead; where a caller relies on the
 * accumulation (layernorm dinp, every weight gradient) it accumulates too.
 */
#ifndef SHOAL_KERNELS_CUDA_LAYERS_CUH
#define SHOAL_KERNELS_CUDA_LAYERS_CUH

#include "cuda_common.cuh"

/* What every launcher needs: where to queue work, and column-sum scratch. */
struct kcu_ctx {
    cudaStream_t stream;  /* every kernel, product and copy of a stage */
    cublasHandle_t blas;  /* bound to stream */
    cublasLtHandle_t lt;  /* the products with an epilogue (kcu_gemm_epilogue); NULL: none */
    void *lt_workspace;   /* device, lt_workspace_bytes: cuBLASLt's scratch */
    size_t lt_workspace_bytes;
    float *colsum;        /* (kcu_colsum_chunks(N), 4C) partial column sums */
};

#define KCU_LT_WORKSPACE ((size_t)32 << 20) /* bytes; what llm.c gives cuBLASLt on Hopper */

/* What a cuBLASLt product does to its result in its own kernel. */
enum kcu_epilogue {
    KCU_EPI_NONE,
    KCU_EPI_BIAS,      /* + bias, one value per output feature (of D's type) */
    KCU_EPI_GELU_BIAS, /* aux = product + bias; D = gelu(aux), the tanh form */
    KCU_EPI_DGELU,     /* D = product * gelu'(aux) */
};

/* Rows one block adds up in the first pass of a column sum (bias and
 * layernorm weight gradients); a second pass adds the partial sums in a fixed
 * order, so results do not depend on scheduling. */
#define KCU_COLSUM_ROWS 32
static inline size_t kcu_colsum_chunks(int N)
{
    return ((size_t)N + KCU_COLSUM_ROWS - 1) / KCU_COLSUM_ROWS;
}

/* The second pass: dst (width) += sum over c < chunks of partial[c *
 * stride + i], c in order. */
int kcu_colsum_finish(const struct kcu_ctx *cx, float *dst, const float *partial, int chunks, int width,
                      int stride, struct kern_err *err);

#define KCU_NORM_BLOCKS 1024 /* partial sums of kcu_sum_squares */

/* Row stride (elements) of the logits, probabilities and their gradient: V
 * rounded up to a multiple of 64, as llm.c pads its vocabulary, so that
 * every row of the largest products of the model starts aligned (GPT-2's
 * V = 50257 misaligns every row after the first, and cuBLAS then falls back
 * to slow kernels). Only the strides are padded: the head (V,C) and the
 * stage files are unchanged, and the columns [V, ld) are neither computed
 * nor read, so they are never predicted and never in the loss. */
#define KCU_VOCAB_ALIGN 64
static inline int kcu_padded_vocab(int V)
{
    return (V + KCU_VOCAB_ALIGN - 1) / KCU_VOCAB_ALIGN * KCU_VOCAB_ALIGN;
}

/* Row-major C (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * C, with the
 * argument meanings of cblas_sgemm(CblasRowMajor, ...): lda, ldb, ldc are
 * elements between rows as stored, op(X) is X^T when trans_x. batch > 1
 * repeats it with the given strides (elements). A and B bf16, C fp32
 * (CUDA_R_32F) or bf16 (CUDA_R_16BF), fp32 accumulation. */
int kcu_gemm(const struct kcu_ctx *cx, int trans_a, int trans_b, int M, int N, int K,
             float alpha, const bf16 *A, int lda, long long stride_a, const bf16 *B, int ldb,
             long long stride_b, float beta, void *C, cudaDataType_t c_type, int ldc,
             long long stride_c, int batch, struct kern_err *err);

/* Row-major D (M,N) = op(A) . op(B) + beta D with an epilogue, the
 * arguments as kcu_gemm's (one product); D of type d_type (fp32 or bf16),
 * rows ldd apart; bias (N) and aux (M,N), rows ld_aux apart (a multiple of
 * 8), of D's type, where the epilogue reads them (cuda_lt.cu). Returns 0,
 * -1 with err set, or 1 when cuBLASLt has no kernel for it (or no handle,
 * or aux is not aligned as it asks), err untouched: the caller computes it
 * with kcu_gemm and kernels of its own. */
int kcu_gemm_epilogue(const struct kcu_ctx *cx, enum kcu_epilogue epi, int trans_a, int trans_b, int M, int N, int K,
                      const bf16 *A, int lda, const bf16 *B, int ldb, float beta, void *D, cudaDataType_t d_type,
                      int ldd, const void *bias, void *aux, int ld_aux, struct kern_err *err);

/* wpe NULL: no learned positions (llama). */
int kcu_encoder_forward(const struct kcu_ctx *cx, float *out, const int32_t *inp,
                        const float *wte, const float *wpe, int B, int T, int C,
                        struct kern_err *err);
/* dwte, dwpe += ; dwte by atomic adds (summation order varies run to run);
 * dwpe NULL: none. */
int kcu_encoder_backward(const struct kcu_ctx *cx, float *dwte, float *dwpe, const float *dout,
                         const int32_t *inp, int B, int T, int C, struct kern_err *err);

int kcu_layernorm_forward(const struct kcu_ctx *cx, bf16 *out, float *mean, float *rstd,
                          const float *inp, const float *weight, const float *bias, int N,
                          int C, struct kern_err *err);
/* res (N,C) = a + b, and the layer norm of res as kcu_layernorm_forward's,
 * in one pass over the rows (a block's residual add and the next norm). */
int kcu_residual_layernorm_forward(const struct kcu_ctx *cx, float *res, bf16 *out, float *mean, float *rstd,
                                   const float *a, const float *b, const float *weight, const float *bias,
                                   int N, int C, struct kern_err *err);
/* dinp (N,C), dweight (C), dbias (C) all += ; dout (N,C) fp32. */
int kcu_layernorm_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, int N, int C,
                           struct kern_err *err);

/* out's rows are ldo >= OC apart. */
int kcu_matmul_forward(const struct kcu_ctx *cx, float *out, const bf16 *inp,
                       const bf16 *weight, const float *bias, int N, int IC, int OC, int ldo,
                       struct kern_err *err);
/* dinp (N,IC) = dout . weight, overwritten (NULL: skipped); dweight (OC,IC)
 * += dout^T . inp (NULL: skipped); dbias (OC) += column sums of dout
 * (NULL: skipped).
 * dout is given in bf16 (dout_bf, for the products and, without dout, the
 * bias sum) and in fp32 or NULL (dout, for the bias sum), its rows ldd >= OC
 * apart in both. The bias is added in the forward's product (cuBLASLt's
 * epilogue) where cuBLASLt has a kernel for it. */
int kcu_matmul_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, float *dbias,
                        const float *dout, const bf16 *dout_bf, const bf16 *inp,
                        const bf16 *weight, int N, int IC, int OC, int ldd,
                        struct kern_err *err);

/* The MLP's first product with GELU: pre (N,OC) bf16 = inp . weight^T +
 * bias, GELU's input kept for the backward, and out (N,OC) bf16 =
 * gelu(pre) (tanh form), in the product's epilogue; the bias in bf16
 * (bias_bf, what the epilogue adds) and fp32 (bias: where cuBLASLt has no
 * kernel, the product goes into scratch (N,OC) fp32 and a kernel of ours
 * adds and applies). */
int kcu_matmul_gelu_forward(const struct kcu_ctx *cx, bf16 *out, bf16 *pre, const bf16 *inp, const bf16 *weight,
                            const bf16 *bias_bf, const float *bias, float *scratch, int N, int IC, int OC,
                            struct kern_err *err);
/* The backward into that GELU: dinp (N,IC) bf16 = (dout . weight) *
 * gelu'(pre), overwritten; pre (N,IC) bf16 the forward's, dout (N,OC) bf16;
 * scratch (N,IC) fp32 where cuBLASLt has no kernel. */
int kcu_matmul_dgelu_backward(const struct kcu_ctx *cx, bf16 *dinp, const bf16 *pre, const bf16 *dout_bf,
                              const bf16 *weight, float *scratch, int N, int IC, int OC, struct kern_err *err);

/* qkvr (3,B,NH,T,hs) and lse (B,NH,T) fp32, each row's log-sum-exp of
 * the scaled scores, are kept for the backward (with out); y (B,NH,T,hs)
 * bf16 is scratch.  Head sizes 1..256 (kcu_attention_head_size_ok); no
 * (T,T) matrix is stored.  window > 0: row t sees (t - window, t] only,
 * and the tiles of keys wholly outside it are skipped; 0: all of [0, t]. */
int kcu_attention_forward(const struct kcu_ctx *cx, bf16 *out, bf16 *qkvr, float *lse, const float *qkv, bf16 *y,
                          int B, int T, int C, int NH, int KVH, const float *cos_t, const float *sin_t, int window,
                          struct kern_err *err);
/* dqkv (B,T,C+2KV) overwritten in fp32 and bf16 (dqkv_bf), dk and dv
 * summed over each group, dq and dk rotated back; dout (B,T,C) fp32, out
 * (B,T,C) bf16 the forward's.  Scratch: delta (B,NH,T) fp32, dy
 * (B,NH,T,hs) bf16, dqkvr (3,B,NH,T,hs) fp32. */
int kcu_attention_backward(const struct kcu_ctx *cx, float *dqkv, bf16 *dqkv_bf, const float *dout, const bf16 *out,
                           const bf16 *qkvr, const float *lse, float *delta, bf16 *dy, float *dqkvr, int B, int T,
                           int C, int NH, int KVH, const float *cos_t, const float *sin_t, int window,
                           struct kern_err *err);
/* 1 when the attention takes head size hs. */
int kcu_attention_head_size_ok(int hs);

int kcu_rmsnorm_forward(const struct kcu_ctx *cx, bf16 *out, float *rstd, const float *inp, const float *weight,
                        float eps, int N, int C, struct kern_err *err);
/* res (N,C) = a + b, and its RMS norm, in one pass (as
 * kcu_residual_layernorm_forward). */
int kcu_residual_rmsnorm_forward(const struct kcu_ctx *cx, float *res, bf16 *out, float *rstd, const float *a,
                                 const float *b, const float *weight, float eps, int N, int C, struct kern_err *err);
/* dinp (N,C), dweight (C) += ; dout (N,C) fp32. */
int kcu_rmsnorm_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, int N, int C,
                         struct kern_err *err);

int kcu_swiglu_forward(const struct kcu_ctx *cx, bf16 *out, const float *gu, int N, int F, struct kern_err *err);
/* dgu (N,2F) overwritten in fp32 and bf16 (dgu_bf); dout (N,F) fp32. */
int kcu_swiglu_backward(const struct kcu_ctx *cx, float *dgu, bf16 *dgu_bf, const float *gu, const float *dout,
                        int N, int F, struct kern_err *err);

/* a[i] = b[i] = a[i] + b[i], i < n: a tied matrix's two gradients. */
int kcu_add_pair(const struct kcu_ctx *cx, float *a, float *b, size_t n, struct kern_err *err);

int kcu_residual_forward(const struct kcu_ctx *cx, float *out, const float *a, const float *b,
                         size_t n, struct kern_err *err);

/* probs (N,V) holds the logits on entry and the probabilities on return;
 * rows of probs and dlogits are ld >= V apart. */
int kcu_crossentropy_forward(const struct kcu_ctx *cx, float *losses, float *probs,
                             const int32_t *targets, int N, int V, int ld, struct kern_err *err);
int kcu_crossentropy_backward(const struct kcu_ctx *cx, bf16 *dlogits, const float *probs,
                              const int32_t *targets, float dloss, int N, int V, int ld,
                              struct kern_err *err);

/* The stage links' wire formats (common/codec.h) on the device: x (rows,
 * cols) fp32 packed into wire (codec_bytes(id, rows * cols, cols) bytes),
 * bit for bit what codec_encode writes, and unpacked again as
 * codec_decode does (cuda_codec.cu). */
int kcu_link_encode(const struct kcu_ctx *cx, enum codec_id id, void *wire, const float *x, int rows, int cols,
                    struct kern_err *err);
int kcu_link_decode(const struct kcu_ctx *cx, enum codec_id id, float *x, const void *wire, int rows, int cols,
                    struct kern_err *err);

/* out (1) = mean of x (n), summed in double like the CPU. */
int kcu_mean(const struct kcu_ctx *cx, float *out, const float *x, int n, struct kern_err *err);
/* out (n) bf16 = inp (n) fp32, rounded to nearest even. */
int kcu_to_bf16(const struct kcu_ctx *cx, bf16 *out, const float *inp, size_t n,
                struct kern_err *err);
/* partial (KCU_NORM_BLOCKS) doubles whose sum is the sum of x[i]^2 over n. */
int kcu_sum_squares(const struct kcu_ctx *cx, double *partial, const float *x, size_t n,
                    struct kern_err *err);
/* One AdamW step on n parameters, formula of cpu_adamw; also refreshes p_bf.
 * b1c, b2c: bias corrections 1 - beta^step; wd: this tensor's weight decay. */
int kcu_adamw(const struct kcu_ctx *cx, float *p, bf16 *p_bf, const float *g, float *m,
              float *v, size_t n, const struct kern_adamw *h, float b1c, float b2c, float wd,
              struct kern_err *err);

#endif
