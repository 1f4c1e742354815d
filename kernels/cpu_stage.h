/* cpu_stage.h - what the CPU backend's families share (not public): the
 * backend's state, a micro-batch slot, the head and loss every family ends
 * with, and the table of families.  cpu_stage.c is the backend's
 * operations; cpu_gpt2.c and cpu_llama.c each run their family's stage. */
#ifndef SHOAL_KERNELS_CPU_STAGE_H
#define SHOAL_KERNELS_CPU_STAGE_H

#include "cpu_layers.h"
#include "stage.h"

/* Everything one micro-batch in flight keeps. */
struct cpu_slot {
    float *mem;                  /* one allocation holding all of the below */
    int32_t *tokens, *targets;   /* (B,T) each, first / last stage */
    float *x0;                   /* (B,T,C) residual stream entering the first block */
    float *blocks;               /* the family's activations of each block, block_floats each */
    float *lnf, *lnf_stat1, *lnf_stat2; /* (B,T,C), (B,T), (B,T): the final norm's output and
                                           statistics (gpt2: mean, rstd; llama: rstd) */
    float *probs;                /* (B,T,V) last stage */
    float *losses;               /* (B,T) last stage */
};

struct cpu_stage {
    float *params, *grads, *m, *v; /* n_params each */
    struct cpu_slot *slots;        /* in_flight */
    size_t block_floats;           /* a block's activations in a slot */
    /* Scratch shared by all micro-batches (one runs at a time). */
    float *scratch_mem;            /* one allocation holding the scratch below */
    float *scratch;                /* the family's, work_floats */
    float *logits, *dlogits;       /* (B,T,V) each, last stage */
    float *dres;                   /* (B,T,C) gradient of the residual stream */
    float *dln;                    /* (B,T,C) */
    float *tables;                 /* the family's constant tables (llama: rope cos, sin), or NULL */
};

/* One family's stage on the CPU. */
struct cpu_family {
    /* Floats of one block's activations in a slot, and of the family's
     * scratch. */
    size_t (*block_floats)(const struct kern_stage *st);
    size_t (*work_floats)(const struct kern_stage *st);
    /* Floats of constant tables, filled once by fill_tables; may be NULL. */
    size_t (*table_floats)(const struct kern_stage *st);
    void (*fill_tables)(const struct kern_stage *st, float *tables);
    /* The stage's forward and backward (kern_ops'), slot and input checked. */
    int (*forward)(struct kern_stage *st, struct cpu_slot *s, const void *input, const int32_t *targets,
                   float *output);
    void (*backward)(struct kern_stage *st, struct cpu_slot *s, const float *grad_output, float *grad_input);
};

extern const struct cpu_family kern_cpu_gpt2, kern_cpu_llama;   /* MODEL_BLOCKS_GPT2, _LLAMA */

/* Hands out consecutive pieces of one allocation; pass base NULL to count. */
static inline float *cpu_carve(float *base, size_t *used, size_t n)
{
    float *p = base ? base + *used : NULL;
    *used += n;
    return p;
}

/* Parameters (or gradients) of tensor t of block l of this stage. */
static inline float *cpu_block_tensor(const struct kern_stage *st, float *base, int l, int t)
{
    return base + st->off_block0 + (size_t)l * st->block_floats + kern_block_offset(&st->model, t);
}

/* Parameters (or gradients) of tensor r (enum kern_llama_tensor) of block
 * l of a stage of the llama kind; NULL when the family has none. */
static inline float *cpu_llama_tensor(const struct kern_stage *st, float *base, int l, enum kern_llama_tensor r)
{
    if (st->llama_off[r] == KERN_ABSENT)
        return NULL;
    return base + st->off_block0 + (size_t)l * st->block_floats + st->llama_off[r];
}

/* The head on the final norm's output s->lnf: logits, then with targets
 * the mean cross-entropy into *output, without them the (B,T,V) logits
 * into output (kern_stage_logits). */
void cpu_head_forward(struct kern_stage *st, struct cpu_slot *s, const int32_t *targets, float *output);

/* The head's backward: head gradients accumulated, d lnf into c->dln
 * (overwritten).  grad_output[0] is d(objective)/d(mean loss). */
void cpu_head_backward(struct kern_stage *st, struct cpu_slot *s, const float *grad_output);

#endif
