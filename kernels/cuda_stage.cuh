/* cuda_stage.cuh - what the CUDA backend's families share (not public): a
 * stage's device state and micro-batch slots, the host staging copies, and
 * the table of families.  cuda_stage.cu is the backend's operations and
 * GPT-2's forward and backward; cuda_llama.cu a Llama's. */
#ifndef SHOAL_KERNELS_CUDA_STAGE_CUH
#define SHOAL_KERNELS_CUDA_STAGE_CUH

#include "cuda_layers.cuh"

/* Hidden states cross the host boundary through the pinned staging buffer in
 * at most KCU_COPY_CHUNKS pieces, so that the CPU's copy of one piece (by the
 * OpenMP threads) overlaps the DMA of the next: a pageable memcpy on one
 * thread was half of an XL middle stage's time on an H200 (kernels/README.md). */
#define KCU_COPY_CHUNKS 8
#define KCU_COPY_MIN ((size_t)1 << 20) /* bytes: smaller pieces, one thread */

struct kcu_llama_acts;
struct kcu_llama_work;

/* Activations one block keeps for its backward, per micro-batch (device). */
struct kcu_block_acts {
    bf16 *ln1;                   /* (B,T,C) */
    float *ln1_mean, *ln1_rstd;  /* (B,T) each */
    bf16 *qkvr;                  /* (3,B,NH,T,hs) q, k, v split into heads */
    float *lse;                  /* (B,NH,T) log-sum-exp of each row's scaled scores */
    bf16 *atty;                  /* (B,T,C) attention output before projection */
    float *res2;                 /* (B,T,C) residual after attention */
    bf16 *ln2;                   /* (B,T,C) */
    float *ln2_mean, *ln2_rstd;  /* (B,T) each */
    bf16 *fch;                   /* (B,T,4C) before GELU */
    bf16 *fch_gelu;              /* (B,T,4C) */
    float *res3;                 /* (B,T,C) block output */
};

/* Everything one micro-batch in flight keeps. */
struct kcu_slot {
    void *mem;                   /* device: one allocation holding all of the below */
    int32_t *tokens, *targets;   /* (B,T) each, first / last stage */
    float *x0;                   /* (B,T,C) residual stream entering the first block */
    struct kcu_block_acts *blocks; /* gpt2: host array, one per block held */
    struct kcu_llama_acts *llama;  /* llama: host array, one per block held */
    bf16 *lnf;                   /* (B,T,C) last stage */
    float *lnf_mean, *lnf_rstd;  /* (B,T) each */
    float *probs;                /* (B,T,Vp) logits, turned into probabilities in place;
                                  * Vp = kcu_padded_vocab(V), columns [V, Vp) unused */
    float *losses;               /* (B,T) */
};

struct kcu_stage {
    struct kcu_ctx cx;             /* stream, cuBLAS handle, column-sum scratch */
    float *params, *grads, *m, *v; /* device, n_params each */
    bf16 *params_bf;               /* device, n_params: what the products read */
    struct kcu_slot *slots;        /* in_flight */
    /* Device scratch shared by all micro-batches (one runs at a time); the
     * fields below are GPT-2's (a Llama's are in `llama`), but for the
     * column sums, the loss and the norm's partial sums, which every
     * family's scratch layout sets. */
    void *scratch;                 /* one allocation holding the rest */
    float *qkv;                    /* (B,T,3C) qkv product before the split into heads */
    float *attproj;                /* (B,T,C) projection output before the residual add */
    float *delta;                  /* (B,NH,T) backward: each row's dy . y */
    bf16 *atty_heads;              /* (B,NH,T,hs) attention output before the merge of heads */
    float *dres;                   /* (B,T,C) gradient of the residual stream */
    bf16 *dres_bf;                 /* (B,T,C) */
    float *dln;                    /* (B,T,C) */
    float *datty;                  /* (B,T,C) */
    bf16 *dy;                      /* (B,NH,T,hs) datty split into heads */
    float *dqkvr;                  /* (3,B,NH,T,hs) dq, dk, dv */
    float *dqkv;                   /* (B,T,3C) */
    bf16 *dqkv_bf;                 /* (B,T,3C) */
    float *dfch_gelu;              /* (B,T,4C): a product before a GELU kernel (where
                                    * cuBLASLt has no epilogue for it) */
    bf16 *dfch_bf;                 /* (B,T,4C) gradient of GELU's input */
    bf16 *dlogits;                 /* (B,T,Vp) last stage, columns [V, Vp) unused */
    float *loss;                   /* (1) mean loss, last stage */
    double *norm_partial;          /* (KCU_NORM_BLOCKS) */
    struct kcu_llama_work *llama;  /* llama's scratch (cuda_llama.cu), or NULL */
    void *wire;                    /* device, kern_stage_link_bytes: a hidden state in the
                                    * link's format; NULL for f32 links */
    /* Pinned host staging, allocated once. */
    float *h_act;                  /* (B,T,C): hidden states in and out, token ids, loss */
    int32_t *h_targets;            /* (B,T) */
    double *h_norm_partial;        /* (KCU_NORM_BLOCKS) */
    cudaEvent_t copied[KCU_COPY_CHUNKS]; /* a download's pieces, landed in h_act */
    cudaStream_t copy_stream;      /* a download that overlaps the stream's later work */
    cudaEvent_t ready;             /* what copy_stream waits for before it copies */
};

/* Hands out consecutive 256-byte aligned pieces of one allocation; pass base
 * NULL to count. Returns the piece (NULL when counting). */
static inline void *carve(void *base, size_t *used, size_t bytes)
{
    void *p = base ? (char *)base + *used : NULL;
    *used += (bytes + 255) & ~(size_t)255;
    return p;
}
#define CARVE_F32(base, used, n) ((float *)carve(base, used, (n) * sizeof(float)))
#define CARVE_BF16(base, used, n) ((bf16 *)carve(base, used, (n) * sizeof(bf16)))
#define CARVE_I32(base, used, n) ((int32_t *)carve(base, used, (n) * sizeof(int32_t)))

/* One family's stage on the GPU. */
struct kcu_family {
    /* The shared scratch (c->scratch, setting cx.colsum, loss and
     * norm_partial) and each slot's device memory (s->mem) with its
     * pointers; kcu_release frees what it got to. */
    int (*alloc)(struct kern_stage *st, struct kcu_stage *c, struct kern_err *err);
    void (*release)(struct kern_stage *st, struct kcu_stage *c);
    int (*forward)(struct kern_stage *st, struct kcu_slot *s, const void *input, const int32_t *targets,
                   void *output, struct kern_err *err);
    int (*backward)(struct kern_stage *st, struct kcu_slot *s, const void *grad_output, void *grad_input,
                    struct kern_err *err);
};
extern const struct kcu_family kcu_gpt2, kcu_llama;

/* Offset (floats) of tensor t of block l of this stage in the flat buffers. */
static inline size_t kcu_toff(const struct kern_stage *st, int l, int t)
{
    return st->off_block0 + (size_t)l * st->block_floats + kern_block_offset(&st->model, t);
}

/* Offset (floats) of tensor r (enum kern_llama_tensor) of block l of a
 * stage of the llama kind, which has it (kcu_lhas). */
static inline size_t kcu_loff(const struct kern_stage *st, int l, enum kern_llama_tensor r)
{
    return st->off_block0 + (size_t)l * st->block_floats + st->llama_off[r];
}
static inline int kcu_lhas(const struct kern_stage *st, enum kern_llama_tensor r)
{
    return st->llama_off[r] != KERN_ABSENT;
}

/* The slot's pieces every family has, carved before the blocks' (token
 * ids, targets, the first block's input) and after them (the last stage's
 * final norm, its statistics, probabilities and losses). */
static inline void kcu_slot_inputs(const struct kern_stage *st, struct kcu_slot *s, void *base, size_t *used)
{
    size_t BT = (size_t)st->spec.micro_batch * st->spec.seq_len;
    s->tokens = CARVE_I32(base, used, st->spec.first ? BT : 0);
    s->targets = CARVE_I32(base, used, st->spec.last ? BT : 0);
    s->x0 = CARVE_F32(base, used, BT * st->model.d_model);
}

static inline void kcu_slot_head(const struct kern_stage *st, struct kcu_slot *s, void *base, size_t *used)
{
    size_t BT = (size_t)st->spec.micro_batch * st->spec.seq_len, V = (size_t)kcu_padded_vocab(st->model.vocab);
    if (!st->spec.last)
        return;
    s->lnf = CARVE_BF16(base, used, BT * st->model.d_model);
    s->lnf_mean = CARVE_F32(base, used, BT);
    s->lnf_rstd = CARVE_F32(base, used, BT);
    s->probs = CARVE_F32(base, used, BT * V);
    s->losses = CARVE_F32(base, used, BT);
}

/* Each slot's device memory, laid out by the family's `layout` (bytes;
 * with base, also sets the slot's pointers); a failure names the slot. */
int kcu_slots_alloc(struct kern_stage *st, struct kcu_stage *c,
                    size_t (*layout)(const struct kern_stage *st, struct kcu_slot *s, void *base),
                    struct kern_err *err);

/* host -> device through the staging buffer, queued; and device -> host,
 * returning when the host holds it all (cuda_stage.cu). */
cudaError_t kcu_upload(struct kcu_stage *c, void *dev, const void *host, size_t bytes);
cudaError_t kcu_download(struct kcu_stage *c, void *host, const void *dev, size_t bytes);

/* A hidden state (B,T,C) crossing a stage boundary, in the stage's link
 * format on the host: into dev (fp32) through c->wire, queued; and out of
 * dev, returning when the host holds it (cuda_stage.cu). */
int kcu_hidden_in(struct kern_stage *st, float *dev, const void *host, struct kern_err *err);
int kcu_hidden_out(struct kern_stage *st, void *host, const float *dev, struct kern_err *err);
/* kcu_hidden_out in two halves: start packs dev after the stream's work so
 * far and copies it out on copy_stream, so the stream's later work (the
 * first block's weight gradients) runs beside the copy; finish returns
 * when the host holds it and the stream's work is done. */
int kcu_hidden_out_start(struct kern_stage *st, const float *dev, struct kern_err *err);
int kcu_hidden_out_finish(struct kern_stage *st, void *host, struct kern_err *err);

/* After a failure: copies queued from the staging buffers, on either
 * stream, finish before the buffers are used again. */
static inline void kcu_settle(struct kcu_stage *c)
{
    (void)cudaStreamSynchronize(c->cx.stream);
    (void)cudaStreamSynchronize(c->copy_stream);
}

/* What every family shares (cuda_stage.cu): the token ids (n) into dev,
 * queued; the head on s->lnf (the final norm's bf16 output): the logits
 * into s->probs and the mean loss into *output, synchronised; its
 * backward: head gradients +=, d lnf into c->dln (overwritten), dlogits in
 * c->dlogits. */
int kcu_tokens_in(struct kcu_stage *c, int32_t *dev, const void *host, int n, struct kern_err *err);
int kcu_head_forward(struct kern_stage *st, struct kcu_slot *s, const int32_t *targets, void *output,
                     struct kern_err *err);
int kcu_head_backward(struct kern_stage *st, struct kcu_slot *s, const void *grad_output, struct kern_err *err);

#endif
