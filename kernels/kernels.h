/* kernels.h - transformer pipeline stages of the model families in
 * common/model.h (GPT-2, and Llama with the families of its kind: Qwen2,
 * Qwen3, OLMo-2), forward and backward, on one of two
 * backends chosen at run time: "cpu" (fp32, OpenBLAS, the oracle) or "cuda"
 * (bf16 matrix products with fp32 accumulation, fp32 master weights and
 * optimizer state).
 *
 * A stage is a contiguous range of transformer blocks [layer_start,
 * layer_end), plus the embeddings when it is the first stage and the final
 * norm, output head and cross-entropy loss when it is the last.  A tied
 * head (model->tied) is a second copy of wte on the last stage, kept equal
 * by summing the two gradients (kern_stage_tie_grads, kern_stage_tied_tensor),
 * so stages never share memory.
 *
 * Shapes: B = sequences per micro-batch, T = tokens per sequence,
 * C = d_model, V = vocab, NH = heads, hs = the head size (C / NH unless
 * the model's head_dim says).
 *
 * Every function that can fail returns 0 on success and -1 on error, with a
 * sentence in err->msg; on error the stage is unchanged unless the function
 * says otherwise.  This directory is the math only and depends on nothing
 * else in shoal but common/model.c and common/codec.c; the files models are
 * read from and written to (stage files, llm.c, safetensors, config.json)
 * are models/'s.
 */
#ifndef SHOAL_KERNELS_H
#define SHOAL_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/codec.h"
#include "../common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KERN_ERR_LEN 256
struct kern_err {
    char msg[KERN_ERR_LEN];
};

/* The whole model (common/model.h): its family (gpt2, llama) and sizes;
 * every stage of one job is built from the same one. */
/* Which part of the model a stage holds and how it is driven. */
struct kern_stage_spec {
    int layer_start;  /* first block held, 0-based */
    int layer_end;    /* one past the last block held; may equal layer_start */
    int first;        /* 1: embeddings live here; input is token ids */
    int last;         /* 1: final LN, head and loss live here; output is the loss */
    int micro_batch;  /* B: sequences per micro-batch */
    int seq_len;      /* T: tokens per sequence, <= context */
    int in_flight;    /* micro-batches whose activations are kept at once (>= 1) */
    uint64_t seed;    /* parameter initialisation; equal seeds give equal layers */
    enum codec_id link; /* how hidden states cross the stage's boundaries
                         * (common/codec.h; CODEC_F32, 0, by default): a
                         * middle stage's input and output, its gradients */
};

/* One AdamW step (decoupled weight decay, bias-corrected moments). */
struct kern_adamw {
    float lr;           /* learning rate of this step */
    float beta1, beta2; /* moment decay, e.g. 0.9, 0.95 */
    float eps;          /* e.g. 1e-8 */
    float weight_decay; /* applied to matrices and embeddings only, not to biases or LN */
    float grad_scale;   /* gradients are multiplied by this first (averaging, clipping) */
};

/* Where a stage runs. */
enum kern_device_kind { KERN_CPU, KERN_CUDA };
struct kern_device {
    enum kern_device_kind kind;
    int index; /* CUDA device ordinal; 0 for cpu */
};

/* Parses "cpu", "cuda" or "cuda:N" and checks the device can be used: the
 * CUDA backend must be compiled in and device N must exist. */
int kern_device_parse(const char *name, struct kern_device *out, struct kern_err *err);

/* What a device is, for registration: the GPU's name and memory (bytes);
 * for "cpu", name "" and memory 0 (the agent reports the host's RAM). */
int kern_device_describe(const struct kern_device *dev, char *name, size_t name_len,
                         size_t *memory_bytes, struct kern_err *err);

/* 1 when this build contains the CUDA backend. */
int kern_cuda_built(void);

/* Caps the CPU kernels' threads (OpenMP, and OpenBLAS through it) at n
 * for kernels called from the calling thread (OpenMP keeps the count per
 * thread: call it from the thread that runs the stages); n < 1 changes
 * nothing. */
void kern_set_threads(int n);

/* One parameter tensor of a stage, in the order of the flat buffers. */
struct kern_tensor {
    char name[32];  /* "wte", "wpe", "h3.qkvw", "lnfw", "head", ... */
    size_t offset;  /* floats from the start of the flat parameter buffer */
    size_t count;   /* floats */
    int rows, cols; /* shape; cols == 1 for vectors */
    int decay;      /* 1 when AdamW weight decay applies */
};

struct kern_stage;

/* Checks a model as kern_stage_new does: every field >= 1, d_model a
 * multiple of heads, vocab x d_model and context x d_model within int. */
int kern_model_check(const struct model_config *m, struct kern_err *err);

/* Validates the model and spec, allocates parameters (initialised from
 * spec->seed: block i gets the same values whatever stage holds it),
 * gradients (zeroed), AdamW state (zeroed) and activation memory for
 * spec->in_flight micro-batches. The caller frees *out with kern_stage_free. */
int kern_stage_new(const struct kern_device *dev, const struct model_config *model,
                   const struct kern_stage_spec *spec, struct kern_stage **out,
                   struct kern_err *err);
void kern_stage_free(struct kern_stage *st);

const struct model_config *kern_stage_model(const struct kern_stage *st);
const struct kern_stage_spec *kern_stage_spec(const struct kern_stage *st);
size_t kern_stage_param_count(const struct kern_stage *st);  /* floats */
int kern_stage_tensor_count(const struct kern_stage *st);
const struct kern_tensor *kern_stage_tensor(const struct kern_stage *st, int i);
uint64_t kern_stage_step(const struct kern_stage *st); /* AdamW steps taken */

/* Forward pass of micro-batch mb (any non-negative number; it occupies slot
 * mb % in_flight until its backward). Host memory in and out:
 *   input:   first stage: int32 token ids (B,T), each in [0,V);
 *            otherwise the hidden state (B,T,C) in the link's wire format
 *            (kern_stage_link_bytes bytes: float for f32, bf16 or int8
 *            rows of C values as common/codec.h packs them).
 *   targets: last stage: int32 next-token ids (B,T) in [0,V); else NULL.
 *   output:  last stage: one float, the mean cross-entropy over B*T tokens;
 *            otherwise the hidden state (B,T,C) in the link's format.
 * A backend that can packs and unpacks the link's format where the hidden
 * state lives (the GPU), so fewer bytes cross to the host; the bytes are
 * those of codec_encode either way.
 * Fails, changing nothing, when the slot still holds another micro-batch or
 * a token id is out of range. */
int kern_stage_forward(struct kern_stage *st, int mb, const void *input,
                       const int32_t *targets, void *output, struct kern_err *err);

/* Backward pass of micro-batch mb, whose forward must be the latest in its
 * slot. Weight gradients are accumulated (+=) into the gradient buffer.
 *   grad_output: last stage: one float, d(objective)/d(loss), e.g. 1/M for
 *                the mean over M micro-batches; otherwise (B,T,C) in the
 *                link's format.
 *   grad_input:  first stage: NULL; otherwise (B,T,C) in the link's
 *                format, overwritten.
 * Frees the slot. */
int kern_stage_backward(struct kern_stage *st, int mb, const void *grad_output,
                        void *grad_input, struct kern_err *err);

/* Bytes of one hidden state (B,T,C) in the stage's link format. */
size_t kern_stage_link_bytes(const struct kern_stage *st);

/* Inference on a last stage (cpu backend only): the forward of `input`
 * (as for kern_stage_forward) through the stage's blocks, final layer norm
 * and head, writing logits (B,T,V) instead of a loss.  Nothing is kept for
 * a backward; it needs slot 0 free and leaves it free.  Fails on a stage
 * that is not last, or on cuda (sampling loads checkpoints on the cpu). */
int kern_stage_logits(struct kern_stage *st, const void *input, float *logits,
                      struct kern_err *err);

/* Forgets every micro-batch in flight (an aborted step). */
void kern_stage_drop_in_flight(struct kern_stage *st);

int kern_stage_zero_grad(struct kern_stage *st, struct kern_err *err);

/* Sum of squared gradients of this stage, accumulated in double.  On the
 * last stage of a tied model (model.tied) the head's gradient is left out:
 * it is the embedding's (kern_stage_tie_grads), counted on the stage that
 * holds wte, so the global norm counts the shared weight once. */
int kern_stage_grad_norm2(struct kern_stage *st, double *out, struct kern_err *err);

/* A tied model (model.tied) trains one matrix as the embedding and the
 * head; a stage holds it as wte (first stage) and as head (last stage),
 * and both copies take the sum of their gradients before every optimizer
 * step, so they stay equal bit for bit.  On a stage holding both (first
 * and last), this sums them in place: call it once a step, after the last
 * backward and before the all-reduce, clipping and AdamW.  Does nothing on
 * other stages or untied models. */
int kern_stage_tie_grads(struct kern_stage *st, struct kern_err *err);

/* On a stage holding one copy of a tied model's shared matrix (wte on the
 * first stage, head on the last, not both): 1, with its place in the flat
 * buffers (floats); the caller sums its gradient with the other copy's
 * (the agent: over the peers, every step, before the all-reduce).  Else 0. */
int kern_stage_tied_tensor(const struct kern_stage *st, size_t *offset, size_t *count);

/* One AdamW step on every parameter; increments the step count. */
int kern_stage_adamw(struct kern_stage *st, const struct kern_adamw *h, struct kern_err *err);

/* The flat fp32 gradient buffer (kern_stage_param_count floats) for an
 * all-reduce: host memory on cpu, device memory on cuda (*on_device = 1).
 * Owned by the stage; valid until kern_stage_free. */
float *kern_stage_grad_buffer(struct kern_stage *st, int *on_device);

/* Host copies of the flat buffers, kern_stage_param_count floats each. */
enum kern_buffer { KERN_PARAMS, KERN_GRADS, KERN_ADAM_M, KERN_ADAM_V };
int kern_stage_read(struct kern_stage *st, enum kern_buffer which, float *dst,
                    struct kern_err *err);
int kern_stage_write(struct kern_stage *st, enum kern_buffer which, const float *src,
                     struct kern_err *err);
/* count floats of buffer `which` from offset off (floats) into host
 * (to_host) or from it: a tensor's part, such as a tied matrix's gradient
 * (kern_stage_tied_tensor).  Fails on a range outside the buffer. */
int kern_stage_range(struct kern_stage *st, enum kern_buffer which, size_t off, size_t count, float *host,
                     int to_host, struct kern_err *err);

/* Per-parameter state a caller keeps with a stage beside AdamW's: host
 * memory, kern_stage_param_count floats each, zeroed when first asked for.
 * Stage files carry the ones that exist (after the AdamW moments); load and
 * assemble restore them tensor by tensor like the moments, and a file
 * without one leaves it absent (NULL) in the stage it loads into. */
enum kern_extra {
    KERN_EXTRA_OUTER_MOMENTUM,   /* DiLoCo's outer Nesterov momentum */
    KERN_EXTRA_SYNC_FEEDBACK,    /* what a compressed sync has not yet delivered (error feedback) */
    KERN_EXTRA_COUNT
};

/* The extra buffer `which`, created zeroed on first use.  Owned by the
 * stage until kern_stage_free.  NULL when memory is short or `which` is
 * not one. */
float *kern_stage_extra(struct kern_stage *st, enum kern_extra which);

/* The extra buffer if the stage has it, else NULL. */
float *kern_stage_extra_if(const struct kern_stage *st, enum kern_extra which);

/* FLOPs of one forward+backward of a micro-batch on this stage (matrix
 * products, 3x the forward's), for throughput and MFU reports. */
double kern_stage_flops(const struct kern_stage *st);

#ifdef __cplusplus
}
#endif

#endif
