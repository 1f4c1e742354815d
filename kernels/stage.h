/* stage.h - what the backends share: the stage object and the operations
 * table each backend fills in. Not part of the public API. */
#ifndef SHOAL_KERNELS_STAGE_H
#define SHOAL_KERNELS_STAGE_H

#include "kernels.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kern_stage;

struct kern_ops {
    /* Allocates backend memory; params (host, n floats) are the initial
     * weights. Gradients and AdamW moments start at zero. */
    int (*init)(struct kern_stage *st, const float *params, struct kern_err *err);
    void (*release)(struct kern_stage *st);
    /* Slot and input already checked by stage.c. */
    /* Hidden states in and out are float (B,T,C), or, for a backend with
     * encodes_links, in the stage's link format (kern_stage_link_bytes). */
    int (*forward)(struct kern_stage *st, int slot, const void *input,
                   const int32_t *targets, void *output, struct kern_err *err);
    int (*backward)(struct kern_stage *st, int slot, const void *grad_output,
                    void *grad_input, struct kern_err *err);
    int (*zero_grad)(struct kern_stage *st, struct kern_err *err);
    /* Sum of squares of gradients [from, from + count), in double. */
    int (*grad_norm2)(struct kern_stage *st, size_t from, size_t count, double *out, struct kern_err *err);
    /* grads[a + i] = grads[b + i] = grads[a + i] + grads[b + i], i < count
     * (a tied model's embedding and head on one stage); NULL where the
     * backend has none. */
    int (*tie_grads)(struct kern_stage *st, size_t a, size_t b, size_t count, struct kern_err *err);
    /* step is the 1-based step number used for bias correction. */
    int (*adamw)(struct kern_stage *st, const struct kern_adamw *h, uint64_t step,
                 struct kern_err *err);
    float *(*grad_buffer)(struct kern_stage *st);
    int (*read)(struct kern_stage *st, enum kern_buffer which, float *dst, struct kern_err *err);
    int (*write)(struct kern_stage *st, enum kern_buffer which, const float *src,
                 struct kern_err *err);
    /* count floats of buffer `which` from offset off (floats) to host
     * (to_host) or from it; checked by stage.c. */
    int (*transfer_range)(struct kern_stage *st, enum kern_buffer which, size_t off, size_t count, float *host,
                          int to_host, struct kern_err *err);
    /* 1: forward and backward pack and unpack the link format themselves
     * (on the device); 0: stage.c does it on the host around them. */
    int encodes_links;
};

/* GPT-2's per-block tensor order (common/model.c's gpt2_block). */
enum kern_block_tensor {
    KT_LN1W, KT_LN1B, KT_QKVW, KT_QKVB, KT_ATTPROJW, KT_ATTPROJB,
    KT_LN2W, KT_LN2B, KT_FCW, KT_FCB, KT_FCPROJW, KT_FCPROJB, KT_BLOCK_COUNT
};
/* What the tensors of a block of the llama kind are to its code (common/
 * model.c's llama_block, qwen2_block, ...), found by name in the family's
 * row (kern_llama_names), since a family's extra tensors move the others:
 * q, k, v consecutive (one fused (NH hd + 2KV, C) matrix), their biases
 * likewise where the family has them (LT_QB the first), gate and up
 * likewise ((2F, C)). */
enum kern_llama_tensor {
    LT_LN1W, LT_QW, LT_OW, LT_LN2W, LT_GATEW, LT_DOWNW,
    LT_QB,                 /* qb, kb, vb (NH hd + 2KV): qkv_bias families */
    LT_QNORMW, LT_KNORMW,  /* q's and k's norm weights: qk_norm families */
    LT_COUNT
};
extern const char *const kern_llama_names[LT_COUNT];

struct kern_stage {
    struct model_config model;
    struct kern_stage_spec spec;
    struct kern_device device;
    const struct kern_ops *ops;
    void *impl;                 /* backend state */

    struct kern_tensor *tensors; /* n_tensors, flat-buffer order */
    int n_tensors;
    size_t n_params;            /* floats */
    /* Offsets (floats) into the flat buffer of the pieces that exist
     * (KERN_ABSENT for those the stage or its family lacks). */
    size_t off_wte, off_wpe;    /* first stage */
    size_t off_block0;          /* first block held */
    size_t block_floats;        /* floats per block */
    size_t off_lnfw, off_lnfb, off_head; /* last stage */
    /* Offset (floats, from the start of a block) of each tensor of a block
     * of the llama kind (KERN_ABSENT: the family has none). */
    size_t llama_off[LT_COUNT];

    int *slot_mb;               /* in_flight: micro-batch in the slot, -1 when free */
    uint64_t step;              /* AdamW steps taken */
    float *extra[KERN_EXTRA_COUNT]; /* host, n_params each, or NULL (kern_stage_extra) */
    /* Bytes a stage file carries beside the buffers (models/checkpoint.c:
     * the Hugging Face files a model was imported from), kept through
     * load, save and assemble; the kernels never read them.  malloc'd, or
     * NULL with file_source_len 0. */
    char *file_source;
    size_t file_source_len;
    /* Host (B,T,C) each: a link's hidden states unpacked for a backend
     * without encodes_links (in, out); NULL when the link is f32. */
    float *link_in, *link_out;
};

#define KERN_ABSENT ((size_t)-1)

/* Offset (floats, from the start of a block) of tensor t (the index in
 * the family's block tensors) of a block of model m. */
size_t kern_block_offset(const struct model_config *m, int t);

/* Formats into err->msg; returns -1 so callers can `return kern_fail(...)`. */
int kern_fail(struct kern_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Fills params (n_params floats) with the stage's deterministic initial
 * weights. */
void kern_layout_init_params(const struct kern_stage *st, float *params);
/* Builds the tensor table and offsets; -1 on allocation failure. */
int kern_layout_build(struct kern_stage *st, struct kern_err *err);

extern const struct kern_ops kern_cpu_ops;
/* NULL when the CUDA backend is not built. */
extern const struct kern_ops *const kern_cuda_ops;
/* CUDA devices present (0 with an error message when none or not built). */
int kern_cuda_device_count(struct kern_err *err);
/* The CUDA device's name and memory (bytes). */
int kern_cuda_describe(int index, char *name, size_t name_len, size_t *memory_bytes, struct kern_err *err);

#ifdef __cplusplus
}
#endif

#endif
