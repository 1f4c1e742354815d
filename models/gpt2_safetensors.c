/* gpt2_safetensors.c - GPT-2 weights in Hugging Face's safetensors format
 * (model_io.h; the container is safetensors.c's), the model.safetensors of
 * GPT2LMHeadModel and GPT2Model.
 *
 * GPT-2's names, each with or without the "transformer." prefix (the hub's
 * gpt2 has none, GPT2LMHeadModel.save_pretrained writes it):
 *   wte.weight (V,C)  wpe.weight (context,C)  ln_f.weight, ln_f.bias (C)
 *   h.N.ln_1.weight/bias (C)   h.N.attn.c_attn.weight (C,3C)  .bias (3C)
 *   h.N.attn.c_proj.weight (C,C)  .bias (C)   h.N.ln_2.weight/bias (C)
 *   h.N.mlp.c_fc.weight (C,4C)  .bias (4C)   h.N.mlp.c_proj.weight (4C,C)  .bias (C)
 *   lm_head.weight (V,C), absent when tied to wte
 *   h.N.attn.bias, h.N.attn.masked_bias: the causal mask buffers older
 *   files carry; skipped.
 * The attention and MLP weights are Conv1D's, (in, out): transposed to and
 * from shoal's (out, in).
 */
#include "safetensors.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "transformer."

/* What a name is: one of the model's tensors (a slot) or a skipped buffer. */
enum { S_WTE, S_WPE, S_LNFW, S_LNFB, S_HEAD, S_BLOCK, S_ATTN_MASK = S_BLOCK + KT_BLOCK_COUNT,
       S_MASKED_BIAS, S_KINDS };

static const struct {
    const char *name;   /* after "h.N." */
    int rows_c, cols_c; /* the file's shape in units of C; rows_c 0: a vector of cols_c C */
    int conv1d;         /* (in, out) in the file, (out, in) in shoal */
} block_names[KT_BLOCK_COUNT] = {
    [KT_LN1W] = {"ln_1.weight", 0, 1, 0},          [KT_LN1B] = {"ln_1.bias", 0, 1, 0},
    [KT_QKVW] = {"attn.c_attn.weight", 1, 3, 1},   [KT_QKVB] = {"attn.c_attn.bias", 0, 3, 0},
    [KT_ATTPROJW] = {"attn.c_proj.weight", 1, 1, 1}, [KT_ATTPROJB] = {"attn.c_proj.bias", 0, 1, 0},
    [KT_LN2W] = {"ln_2.weight", 0, 1, 0},          [KT_LN2B] = {"ln_2.bias", 0, 1, 0},
    [KT_FCW] = {"mlp.c_fc.weight", 1, 4, 1},       [KT_FCB] = {"mlp.c_fc.bias", 0, 4, 0},
    [KT_FCPROJW] = {"mlp.c_proj.weight", 4, 1, 1}, [KT_FCPROJB] = {"mlp.c_proj.bias", 0, 1, 0},
};
static const char *const global_names[S_BLOCK] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
                                                  "lm_head.weight"};

/* The name without prefix, for messages. */
static const char *kind_name(int kind, int layer, char *buf, size_t cap)
{
    if (kind < S_BLOCK)
        return global_names[kind];
    snprintf(buf, cap, "h.%d.%s", layer,
             kind == S_ATTN_MASK ? "attn.bias" : kind == S_MASKED_BIAS ? "attn.masked_bias"
                                                                        : block_names[kind - S_BLOCK].name);
    return buf;
}

/* The kind and block of a tensor name; -1 for a name GPT-2 does not have. */
static int classify(const char *name, void *ctx, int *kind, int *layer)
{
    (void)ctx;
    if (strncmp(name, PREFIX, strlen(PREFIX)) == 0)
        name += strlen(PREFIX);
    *layer = 0;
    for (int k = 0; k < S_BLOCK; k++)
        if (strcmp(name, global_names[k]) == 0) {
            *kind = k;
            return 0;
        }
    if (strncmp(name, "h.", 2) != 0)
        return -1;
    const char *d = name + 2;
    long n = 0;
    int digits = 0;
    for (; *d >= '0' && *d <= '9'; d++, digits++)
        if ((n = n * 10 + (*d - '0')) >= KERN_MODEL_MAX_LAYERS)
            return -1;
    if (digits == 0 || (digits > 1 && name[2] == '0') || *d != '.')
        return -1;
    *layer = (int)n;
    d++;
    for (int t = 0; t < KT_BLOCK_COUNT; t++)
        if (strcmp(d, block_names[t].name) == 0) {
            *kind = S_BLOCK + t;
            return 0;
        }
    *kind = strcmp(d, "attn.bias") == 0 ? S_ATTN_MASK : strcmp(d, "attn.masked_bias") == 0 ? S_MASKED_BIAS : -1;
    return *kind < 0 ? -1 : 0;
}

/* The file's shape of a kind, in a model of V, T, C: *ndim 1 or 2. */
static void file_shape(int kind, uint64_t V, uint64_t T, uint64_t C, int *ndim, uint64_t dim[2])
{
    *ndim = 2;
    dim[1] = C;
    switch (kind) {
    case S_WTE: case S_HEAD: dim[0] = V; return;
    case S_WPE: dim[0] = T; return;
    case S_LNFW: case S_LNFB: *ndim = 1; dim[0] = C; return;
    default: break;
    }
    int rows = block_names[kind - S_BLOCK].rows_c, cols = block_names[kind - S_BLOCK].cols_c;
    *ndim = rows ? 2 : 1;
    dim[0] = rows ? (uint64_t)rows * C : (uint64_t)cols * C;
    dim[1] = rows ? (uint64_t)cols * C : 0;
}

/* Index in the whole model's tensor table (layout.c) of a model kind. */
static int table_index(int kind, int layer, int L)
{
    switch (kind) {
    case S_WTE: return 0;
    case S_WPE: return 1;
    case S_LNFW: return 2 + KT_BLOCK_COUNT * L;
    case S_LNFB: return 3 + KT_BLOCK_COUNT * L;
    case S_HEAD: return 4 + KT_BLOCK_COUNT * L;
    default: return 2 + KT_BLOCK_COUNT * layer + (kind - S_BLOCK);
    }
}

/* Every tensor once, in its shape: slot[table_index] gets its entry. */
static int check_tensors(const struct st_entry *e, int n, const struct model_config *m, int *slot,
                         struct kern_err *err)
{
    int L = m->layers, count = 5 + KT_BLOCK_COUNT * L;
    char a[64], *masks = calloc(2 * (size_t)L, 1);
    int rc = -1;
    if (!masks)
        return kern_fail(err, "safetensors: out of memory");
    for (int i = 0; i < count; i++)
        slot[i] = -1;
    for (int i = 0; i < n; i++) {
        const char *name = kind_name(e[i].kind, e[i].layer, a, sizeof a);
        if (e[i].kind >= S_BLOCK && e[i].layer >= L) {
            kern_fail(err, "safetensors: tensor %s, but the model's blocks end at h.%d", name, L - 1);
            goto out;
        }
        char *seen = e[i].kind == S_ATTN_MASK ? &masks[2 * e[i].layer]
                     : e[i].kind == S_MASKED_BIAS ? &masks[2 * e[i].layer + 1] : NULL;
        int *s = seen ? NULL : &slot[table_index(e[i].kind, e[i].layer, L)];
        if ((seen && (*seen)++) || (s && *s >= 0)) {
            kern_fail(err, "safetensors: tensor %s appears twice (with and without the prefix?)", name);
            goto out;
        }
        if (seen)
            continue;
        *s = i;
        int ndim;
        uint64_t dim[2];
        file_shape(e[i].kind, (uint64_t)m->vocab, (uint64_t)m->context, (uint64_t)m->d_model, &ndim, dim);
        if (e[i].ndim != ndim || e[i].dim[0] != dim[0] || (ndim == 2 && e[i].dim[1] != dim[1])) {
            char got[64], want[64];
            kern_fail(err, "safetensors: tensor %s has shape %s; a GPT-2 of V=%d T=%d C=%d wants %s", name,
                      st_shape_str(e[i].ndim, e[i].dim, got, sizeof got), m->vocab, m->context, m->d_model,
                      st_shape_str(ndim, dim, want, sizeof want));
            goto out;
        }
        if (e[i].dtype > IO_BF16) {
            kern_fail(err, "safetensors: tensor %s is %s; this reads F32, F16 and BF16", name,
                      st_dtype_name(e[i].dtype));
            goto out;
        }
    }
    for (int i = 0; i < count; i++)
        if (slot[i] < 0 && i != table_index(S_HEAD, 0, L)) {
            int kind = i == 0 ? S_WTE : i == 1 ? S_WPE : i == count - 3 ? S_LNFW : i == count - 2 ? S_LNFB
                                                                              : S_BLOCK + (i - 2) % KT_BLOCK_COUNT;
            kern_fail(err, "safetensors: tensor %s is missing",
                      kind_name(kind, (i - 2) / KT_BLOCK_COUNT, a, sizeof a));
            goto out;
        }
    rc = 0;
out:
    free(masks);
    return rc;
}

/* The model the entries describe: V and C from wte, T from wpe, L from the
 * highest block named. */
static int model_of(const struct st_entry *e, int n, int heads, struct model_config *m, struct kern_err *err)
{
    const struct st_entry *wte = NULL, *wpe = NULL;
    int L = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].kind == S_WTE)
            wte = &e[i];
        if (e[i].kind == S_WPE)
            wpe = &e[i];
        if (e[i].kind >= S_BLOCK && e[i].kind < S_ATTN_MASK && e[i].layer >= L)
            L = e[i].layer + 1;
    }
    if (!wte || !wpe)
        return kern_fail(err, "safetensors: tensor %s is missing", wte ? "wpe.weight" : "wte.weight");
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->dim[0] > INT_MAX || wte->dim[1] > INT_MAX ||
        wpe->dim[0] > INT_MAX || wpe->dim[1] != wte->dim[1])
        return kern_fail(err, "safetensors: wte.weight [%llu,%llu] and wpe.weight [%llu,%llu] are not (V,C) and "
                         "(context,C)", (unsigned long long)wte->dim[0], (unsigned long long)wte->dim[1],
                         (unsigned long long)wpe->dim[0], (unsigned long long)wpe->dim[1]);
    if (L == 0)
        return kern_fail(err, "safetensors: the file holds no transformer blocks (h.N.*)");
    if (heads < 1)
        return kern_fail(err, "safetensors: %d heads; give the number of attention heads (config.json's n_head)",
                         heads);
    *m = (struct model_config){.vocab = (int)wte->dim[0], .context = (int)wpe->dim[0], .d_model = (int)wte->dim[1],
                             .heads = heads, .layers = L};
    return 0;
}

static int st_read(const struct io_src *src, int heads, struct model_config *model, float **params,
                   struct kern_err *err)
{
    uint64_t hlen, data_len;
    char *text = NULL;
    struct st_entry *e = NULL;
    int n = 0, *slot = NULL, rc = -1;
    float *p = NULL, *scratch = NULL;
    struct model_config m;
    struct kern_stage w;

    memset(&w, 0, sizeof w);
    if (st_header_read(src, "safetensors", &text, &hlen, &data_len, err))
        return -1;
    if (st_parse_header(text, hlen, data_len, classify, NULL, "a GPT-2 model", &e, &n, err) ||
        st_check_coverage(e, n, data_len, err) || model_of(e, n, heads, &m, err))
        goto out;
    if (io_layout(&m, 0, m.layers, &w, err)) {
        io_fail_in(err, "safetensors");
        goto out;
    }
    if (!(slot = malloc((size_t)w.n_tensors * sizeof *slot))) {
        kern_fail(err, "safetensors: out of memory");
        goto out;
    }
    /* Only now is every tensor known to be in the file in its shape, so
     * what is allocated next is bounded by the file's size. */
    if (check_tensors(e, n, &m, slot, err))
        goto out;
    size_t C = (size_t)m.d_model;
    p = malloc(w.n_params * sizeof *p);
    scratch = malloc(4 * C * C * sizeof *scratch); /* the largest Conv1D weight */
    if (!p || !scratch) {
        kern_fail(err, "safetensors: out of memory for %zu parameters", w.n_params);
        goto out;
    }
    for (int i = 0; i < w.n_tensors; i++) {
        const struct kern_tensor *t = &w.tensors[i];
        if (slot[i] < 0) { /* no lm_head: tied */
            memcpy(p + t->offset, p + w.off_wte, t->count * sizeof *p);
            continue;
        }
        const struct st_entry *x = &e[slot[i]];
        int conv1d = x->kind >= S_BLOCK && block_names[x->kind - S_BLOCK].conv1d;
        float *dst = conv1d ? scratch : p + t->offset;
        if (io_read_floats(src, 8 + hlen + x->begin, (enum io_dtype)x->dtype, t->count, dst, t->name, err)) {
            io_fail_in(err, "safetensors");
            goto out;
        }
        /* the file's (in, out) to shoal's (out, in) */
        for (size_t in = 0; conv1d && in < x->dim[0]; in++)
            for (size_t o = 0; o < x->dim[1]; o++)
                p[t->offset + o * x->dim[0] + in] = scratch[in * x->dim[1] + o];
    }
    *model = m;
    *params = p;
    p = NULL;
    rc = 0;
out:
    free(text);
    free(e);
    free(slot);
    free(p);
    free(scratch);
    io_layout_free(&w);
    return rc;
}

int kern_safetensors_read(const void *data, size_t size, int heads, struct model_config *model,
                          float **params, struct kern_err *err)
{
    struct io_src src;
    io_src_mem(&src, data, size);
    return st_read(&src, heads, model, params, err);
}

int kern_safetensors_read_file(FILE *f, int heads, struct model_config *model, float **params,
                               struct kern_err *err)
{
    struct io_src src;
    if (io_src_file(&src, f, err))
        return io_fail_in(err, "safetensors");
    return st_read(&src, heads, model, params, err);
}

/* ---- writing ---------------------------------------------------------- */

/* The kind and block of whole-model tensor i: table_index's inverse. */
static int written_kind(int i, int L, int *layer)
{
    *layer = i >= 2 ? (i - 2) / KT_BLOCK_COUNT : 0;
    return i == 0 ? S_WTE : i == 1 ? S_WPE : i == 2 + KT_BLOCK_COUNT * L ? S_LNFW
           : i == 3 + KT_BLOCK_COUNT * L ? S_LNFB : i == 4 + KT_BLOCK_COUNT * L ? S_HEAD
           : S_BLOCK + (i - 2) % KT_BLOCK_COUNT;
}

int kern_safetensors_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    return kern_safetensors_write_as(f, m, params, 0, err);
}

int kern_safetensors_write_as(FILE *f, const struct model_config *m, const float *params, int bf16,
                              struct kern_err *err)
{
    struct kern_stage w;
    struct st_out *out = NULL;
    char name[64];
    int rc = -1;

    if (io_check_gpt2(m, "safetensors export", err))
        return -1;
    if (io_layout(m, 0, m->layers, &w, err))
        return io_fail_in(err, "safetensors export");
    int L = m->layers, n = w.n_tensors - kern_model_head_tied(m, params); /* a tied head is not written */
    if (!(out = calloc((size_t)n, sizeof *out))) {
        kern_fail(err, "safetensors export: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const struct kern_tensor *t = &w.tensors[i];
        int layer, kind = written_kind(i, L, &layer), ndim;
        uint64_t dim[2];
        file_shape(kind, (uint64_t)m->vocab, (uint64_t)m->context, (uint64_t)m->d_model, &ndim, dim);
        snprintf(out[i].name, sizeof out[i].name, "%s%s", kind == S_HEAD ? "" : PREFIX,
                 kind_name(kind, layer, name, sizeof name));
        out[i].ndim = ndim;
        out[i].rows = ndim == 2 ? dim[0] : 1;
        out[i].cols = ndim == 2 ? dim[1] : dim[0];
        out[i].data = params + t->offset;
        out[i].transpose = kind >= S_BLOCK && block_names[kind - S_BLOCK].conv1d; /* (out, in) to (in, out) */
    }
    rc = st_write(f, out, n, bf16, "safetensors export", err);
out:
    free(out);
    io_layout_free(&w);
    return rc;
}
