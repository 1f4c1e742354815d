/* model.h - the model families shoal trains, as data.
 *
 * A family (gpt2, llama, qwen2, qwen3, olmo2) is one row of model_families[]: the
 * tensors of its embedding, of one transformer block and of its head, each
 * with its shape (in the model's own dimensions), initialisation, weight
 * decay and whether it is a matrix multiplied per token, plus the
 * activation memory a block keeps per token.  From that row come every
 * count the layers above need: parameters of any stage, FLOPs per token,
 * activation bytes.  The kernels (layout, stage files), the scheduler's
 * cost model and the job specification all read it; none of them switches
 * on the family by hand.
 * A family is a new row here; one whose blocks are Llama's with a
 * difference the row's fields name (biases, q/k norms) needs nothing
 * more, another kind of block its layers in the kernels.
 *
 * Needs nothing but libc, so that every program (and the stage-file check
 * the server links alone) can link it.
 */
#ifndef SHOAL_MODEL_H
#define SHOAL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum model_arch { MODEL_GPT2, MODEL_LLAMA, MODEL_QWEN2, MODEL_QWEN3, MODEL_OLMO2, MODEL_ARCH_COUNT };

/* The stage code that runs a family's blocks (each backend has one per
 * kind; a family's other differences are the fields of its row). */
enum model_blocks { MODEL_BLOCKS_GPT2, MODEL_BLOCKS_LLAMA, MODEL_BLOCKS_COUNT };

/* RMSNorms of q and k after their projection, before the rotation. */
enum model_qk_norm {
    MODEL_QK_NONE,
    MODEL_QK_HEAD,    /* each head over its hd channels, one weight (hd) shared by the heads (Qwen3) */
    MODEL_QK_WIDTH,   /* over the whole q (NH hd) and k (KV hd) projections, weights that wide (OLMo-2) */
};

/* Llama 3.1/3.2's "rope_scaling" of type "llama3"; factor 0: none. */
struct model_rope_scaling {
    double factor;            /* long wavelengths are divided by this */
    double low_freq_factor;   /* wavelengths above original_context / low_freq_factor are scaled */
    double high_freq_factor;  /* wavelengths below original_context / high_freq_factor are kept */
    int original_context;     /* original_max_position_embeddings, tokens */
};

/* The whole model; every stage of one job is built from the same one.
 * Fields a family does not use stay 0; model_config_normalise fills the
 * family's defaults for those a caller leaves 0. */
struct model_config {
    int vocab;      /* V: tokens in the vocabulary */
    int context;    /* longest sequence (gpt2: rows of the position embedding), tokens */
    int d_model;    /* C: channels of the residual stream */
    int heads;      /* NH: query heads */
    int layers;     /* L: transformer blocks */
    enum model_arch arch;
    int kv_heads;   /* key/value heads (grouped-query attention); heads % kv_heads == 0 */
    int ffn_dim;    /* F: the MLP's hidden width (gpt2: 4C) */
    int tied;       /* 1: the output head shares the token embedding's weights */
    int head_dim;   /* hd: channels of one attention head; 0 (normalised to C / NH, which
                       must then divide) unless the family lets NH hd differ from C */
    int sliding_window; /* tokens position t attends to, t itself included ((t - W, t]); 0: all */
    double norm_eps;    /* layer norm / RMS norm epsilon */
    double rope_theta;  /* llama: rotary base */
    struct model_rope_scaling rope_scaling;
};

/* Which part of the model a tensor belongs to. */
enum model_part { MODEL_EMBED, MODEL_BLOCK, MODEL_HEAD, MODEL_PARTS };

/* A tensor dimension in the model's own terms; the extent is times x dim. */
enum model_dim {
    MD_ONE, MD_C, MD_V, MD_CTX,
    MD_KV,    /* kv_heads x hd: a k or v projection */
    MD_FFN,
    MD_Q,     /* heads x hd: the q projection, the attention's output (C unless head_dim says) */
    MD_HD,    /* hd: one head */
};
struct model_extent {
    enum model_dim dim;
    int times;
};

enum model_init {
    MI_ZEROS,
    MI_ONES,
    MI_NORMAL,      /* N(0, 0.02) */
    MI_NORMAL_OUT,  /* N(0, 0.02 / sqrt(2L)): projections writing into the residual stream */
};

struct model_tensor {
    const char *name;          /* shoal's; a block's is "h<i>.<name>" */
    struct model_extent rows, cols;   /* a vector has rows {MD_ONE, 1} */
    enum model_init init;
    int stream;                /* initialisation stream within its part */
    int decay;                 /* 1: AdamW weight decay applies */
    int matmul;                /* 1: multiplied with every token (counts in FLOPs) */
    const char *hf;            /* its name in Hugging Face files, "%d" for the block, the same
                                  shape (out, in); NULL where the family's reader keeps its own
                                  (gpt2: gpt2_safetensors.c, for Conv1D's transposes and the
                                  optional "transformer." prefix) */
};

struct model_family {
    const char *name;          /* "gpt2", "llama", "qwen2", "qwen3", "olmo2": the job's model.architecture */
    enum model_blocks blocks;  /* the stage code that runs its blocks */
    /* What the llama code path reads (gpt2: 0): */
    int qkv_bias;              /* 1: q, k and v add biases (qb, kb, vb, consecutive) */
    enum model_qk_norm qk_norm;  /* q and k normalised (qnormw, knormw) before the rotation */
    int norm_after;            /* 1: the block's two norms (ln1w, ln2w) take the attention's and the
                                  MLP's outputs, inside the residual: x + norm(attn(x)) (OLMo-2);
                                  0: their inputs, x + attn(norm(x)) */
    const char *hf_model_type; /* config.json's "model_type" */
    const char *hf_class;      /* config.json's "architectures": transformers' class */
    /* transformers' defaults for what a config.json may leave out (its
     * configuration class's): bos_token_id and eos_token_id (-1: None),
     * the norm's epsilon */
    int hf_bos, hf_eos;
    double hf_norm_eps;
    const struct model_tensor *tensors[MODEL_PARTS];
    int n_tensors[MODEL_PARTS];
    /* Activation values one block keeps per token for its backward, at
     * act_bytes each: a function of C, the heads and the sequence length
     * T (the attention probabilities grow with T). */
    double (*block_act_values)(const struct model_config *m, double T);
    /* Buffers Hugging Face files may carry that are no parameters
     * (skipped), "%d" for the block; NULL-terminated. */
    const char *const *hf_skipped;
};

extern const struct model_family model_families[MODEL_ARCH_COUNT];

/* The family of a name ("gpt2", "llama", ...); NULL when none is. */
const struct model_family *model_family_by_name(const char *name);

/* Fills what a caller left 0 with the family's defaults: kv_heads =
 * heads, head_dim = C / NH (where NH divides C), gpt2's ffn_dim = 4C,
 * norm_eps 1e-5, a rotary family's rope_theta 10000. */
void model_config_normalise(struct model_config *m);

/* Checks a normalised model: sizes >= 1, heads x head_dim = d_model
 * unless head_dim was given, heads a multiple of kv_heads, what the family
 * fixes (gpt2: kv_heads = heads, ffn_dim = 4C, untied, head_dim C / NH,
 * no window; rotary families: an even head size), a finite
 * positive epsilon and rope_theta, a usable rope_scaling, and tensor sizes
 * within int.  Returns 0, or -1 with *field set to the offending field's
 * name in a job's "model" object ("kv_heads", "rope_scaling.factor") and a
 * sentence in msg. */
int model_config_check(const struct model_config *m, const char **field, char *msg, size_t msg_len);

/* 1 when two normalised models are the same model (every field). */
int model_config_equal(const struct model_config *a, const struct model_config *b);

/* "V=.. T=.. C=.. NH=.. L=.." and the family's other fields, for messages. */
void model_config_text(const struct model_config *m, char *buf, size_t len);

/* Rows and columns of tensor t of m. */
size_t model_extent_size(const struct model_config *m, struct model_extent e);

/* Floats of a part's parameters (MODEL_BLOCK: one block). */
uint64_t model_part_params(const struct model_config *m, enum model_part part);
/* Bytes of training state a parameter holds: its f32 weight, gradient and
 * AdamW's two moments (what the planner's memory check and an agent's
 * --max-memory count; activations come on top). */
#define MODEL_STATE_BYTES_PER_PARAM 16

/* A range of layers as people read it, in logs, errors, command output and
 * the dashboard: the first and the last layer, both included ("layers
 * 0-5" are the first six).  Numbers in the API and in files stay
 * layer_start and layer_end, the end excluded (0 and 6).  Use the two
 * together: printf("stage %d (layers " LAYER_RANGE_FMT ")", s,
 * LAYER_RANGE(start, end)); a range must hold a layer (start < end). */
#define LAYER_RANGE_FMT "%lld-%lld"
/* (long long: a file's header may say any int, and its end less one must not overflow) */
#define LAYER_RANGE(start, end) (long long)(start), (long long)(end) - 1

/* Floats of the stage holding blocks [layer_start, layer_end), with the
 * embedding when first and the head when last; 0 when that overflows. */
uint64_t model_stage_params(const struct model_config *m, int layer_start, int layer_end, int first, int last);

/* Floats of the matrix a tied head shares with the token embedding
 * (V x C); 0 when the head is untied. */
uint64_t model_tied_params(const struct model_config *m);

/* Parameters multiplied with every token, of one part (MODEL_BLOCK: one
 * block): the FLOPs of a forward are 2 per such parameter per token. */
double model_part_matmul_params(const struct model_config *m, enum model_part part);

/* FLOPs of one forward+backward per token (3x the forward): the matrix
 * products of `blocks` blocks (and the head when `last`) plus causal
 * attention over T tokens, llm.c's convention (6N + 6 L C T), with NH hd
 * for C and at most sliding_window positions for T. */
double model_flops_per_token(const struct model_config *m, int blocks, int last, double T);

/* Activation values one block keeps per token for its backward. */
double model_block_act_values(const struct model_config *m, double T);

/* Width of a row of the q, k and v products side by side, values: NH hd
 * plus twice KV hd (GQA's smaller k and v). */
size_t model_qkv_width(const struct model_config *m);

/* hd, the channels of one head: head_dim, or C / NH where it is 0. */
int model_head_dim(const struct model_config *m);

/* NH hd: the width of q and of the attention's output. */
int model_q_width(const struct model_config *m);

/* The segments the family's q and k norms run over (values): each head's
 * hd, or the whole q (NH hd) and k (KV hd); both 0 when it has none.
 * Returns the norms' statistics per token (NH hd / sq + KV hd / sk), 0
 * without norms. */
int model_qk_segments(const struct model_config *m, int *sq, int *sk);

/* Rotary inverse frequency of pair i (0 <= i < hd/2), radians per
 * position: theta^(-2i/hd), adjusted by rope_scaling as Llama 3 does. */
double model_rope_inv_freq(const struct model_config *m, int i);

#ifdef __cplusplus
}
#endif

#endif
