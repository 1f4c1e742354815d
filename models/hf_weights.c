/* hf_weights.c - a model family's weights in Hugging Face's safetensors
 * files (model_io.h), by the names its row gives (common/model.c's `hf`):
 * one model.safetensors, or the shards a model.safetensors.index.json
 * names.  Llama's: model.embed_tokens.weight (V,C),
 * model.layers.N.{input_layernorm,post_attention_layernorm}.weight (C),
 * model.layers.N.self_attn.{q,k,v,o}_proj.weight (out, in),
 * model.layers.N.mlp.{gate,up,down}_proj.weight, model.norm.weight,
 * lm_head.weight (absent when the head is tied).  Shapes are those the
 * model (its config.json) makes, so the heads, kv heads and MLP width are
 * checked, not guessed. */
#include "hf_json.h"
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

#define KIND(part, i) ((part) * 256 + (i))
#define KIND_SKIPPED (-2) /* a buffer the family's files may carry */

/* 1 when `name` is `pattern` with "%d" standing for a block number (no
 * sign, no leading zero) below `layers`; *layer gets it (0 without "%d"). */
static int name_matches(const char *pattern, const char *name, int layers, int *layer)
{
    const char *d = strstr(pattern, "%d");
    *layer = 0;
    if (!d)
        return strcmp(pattern, name) == 0;
    size_t pre = (size_t)(d - pattern);
    if (strncmp(pattern, name, pre) != 0)
        return 0;
    const char *n = name + pre;
    long v = 0;
    int digits = 0;
    for (; *n >= '0' && *n <= '9'; n++, digits++)
        if ((v = v * 10 + (*n - '0')) >= layers)
            return 0;
    if (digits == 0 || (digits > 1 && name[pre] == '0') || strcmp(n, d + 2) != 0)
        return 0;
    *layer = (int)v;
    return 1;
}

static int classify(const char *name, void *ctx, int *kind, int *layer)
{
    const struct model_config *m = ctx;
    const struct model_family *f = &model_families[m->arch];
    for (int part = 0; part < MODEL_PARTS; part++)
        for (int i = 0; i < f->n_tensors[part]; i++)
            if (f->tensors[part][i].hf && name_matches(f->tensors[part][i].hf, name, m->layers, layer)) {
                *kind = KIND(part, i);
                return 0;
            }
    for (const char *const *s = f->hf_skipped; s && *s; s++)
        if (name_matches(*s, name, m->layers, layer)) {
            *kind = KIND_SKIPPED;
            return 0;
        }
    return -1;
}

/* Index in the whole model's tensor table (layout.c's order) of a kind. */
static int table_index(const struct model_config *m, int kind, int layer)
{
    const struct model_family *f = &model_families[m->arch];
    int part = kind / 256, i = kind % 256, embed = f->n_tensors[MODEL_EMBED], block = f->n_tensors[MODEL_BLOCK];
    return part == MODEL_EMBED ? i : part == MODEL_BLOCK ? embed + layer * block + i
                                                         : embed + m->layers * block + i;
}

/* The Hugging Face name of whole-model tensor t of the layout. */
static void hf_name(const struct model_config *m, int t, char *buf, size_t cap)
{
    const struct model_family *f = &model_families[m->arch];
    int embed = f->n_tensors[MODEL_EMBED], block = f->n_tensors[MODEL_BLOCK];
    const struct model_tensor *d = t < embed ? &f->tensors[MODEL_EMBED][t]
        : t < embed + m->layers * block ? &f->tensors[MODEL_BLOCK][(t - embed) % block]
        : &f->tensors[MODEL_HEAD][t - embed - m->layers * block];
    const char *at = strstr(d->hf, "%d");   /* the row's patterns hold at most one */
    if (!at)
        snprintf(buf, cap, "%s", d->hf);
    else
        snprintf(buf, cap, "%.*s%d%s", (int)(at - d->hf), d->hf, (t - embed) / block, at + 2);
}

/* A tied model's head: the file may leave lm_head.weight out. */
static int is_tied_head(const struct model_config *m, const struct kern_stage *w, int t)
{
    return m->tied && w->tensors[t].offset == w->off_head;
}

/* Entries of one file into the slots of the whole model, checked. */
static int take_entries(const struct model_config *m, const struct kern_stage *w, const struct st_entry *e, int n,
                        int file, int *slot_file, int *slot_entry, const char *fname, struct kern_err *err)
{
    for (int i = 0; i < n; i++) {
        if (e[i].kind == KIND_SKIPPED)
            continue;
        int t = table_index(m, e[i].kind, e[i].layer);
        const struct kern_tensor *k = &w->tensors[t];
        if (slot_file[t] >= 0)
            return kern_fail(err, "safetensors: tensor %s appears twice (%s)", e[i].name, fname);
        uint64_t want[2] = {k->rows == 1 ? (uint64_t)k->cols : (uint64_t)k->rows, (uint64_t)k->cols};
        int ndim = k->rows == 1 ? 1 : 2;
        if (e[i].ndim != ndim || e[i].dim[0] != want[0] || (ndim == 2 && e[i].dim[1] != want[1])) {
            char got[64], w2[64], text[200];
            model_config_text(m, text, sizeof text);
            return kern_fail(err, "safetensors: %s: tensor %s has shape %s; the model (%s) makes %s", fname,
                             e[i].name, st_shape_str(e[i].ndim, e[i].dim, got, sizeof got), text,
                             st_shape_str(ndim, want, w2, sizeof w2));
        }
        if (e[i].dtype > IO_BF16)
            return kern_fail(err, "safetensors: %s: tensor %s is %s; this reads F32, F16 and BF16", fname,
                             e[i].name, st_dtype_name(e[i].dtype));
        slot_file[t] = file;
        slot_entry[t] = i;
    }
    return 0;
}

/* One shard (or the only file): its header. */
struct shard {
    struct io_src src;
    char *text;
    uint64_t hlen, data_len;
    struct st_entry *e;
    int n;
};

int kern_hf_read(const struct model_config *m, FILE *const *files, const char *const *names, int n_files,
                 float **params, struct kern_err *err)
{
    struct kern_stage w;
    struct shard *sh = calloc(n_files > 0 ? (size_t)n_files : 1, sizeof *sh);
    int *slot_file = NULL, *slot_entry = NULL, rc = -1;
    float *p = NULL;
    char name[ST_NAME_MAX];

    memset(&w, 0, sizeof w);
    if (!sh)
        return kern_fail(err, "safetensors: out of memory");
    if (n_files < 1) {
        kern_fail(err, "safetensors: no file to read");
        goto out;
    }
    for (int s = 0; s < MODEL_PARTS && m->arch < MODEL_ARCH_COUNT; s++)
        for (int i = 0; i < model_families[m->arch].n_tensors[s]; i++)
            if (!model_families[m->arch].tensors[s][i].hf) {
                kern_fail(err, "safetensors: architecture \"%s\" is read by its own reader",
                          model_families[m->arch].name);
                goto out;
            }
    if (io_layout(m, 0, m->layers, &w, err)) {
        io_fail_in(err, "safetensors");
        goto out;
    }
    slot_file = malloc((size_t)w.n_tensors * sizeof *slot_file);
    slot_entry = malloc((size_t)w.n_tensors * sizeof *slot_entry);
    if (!slot_file || !slot_entry) {
        kern_fail(err, "safetensors: out of memory");
        goto out;
    }
    for (int t = 0; t < w.n_tensors; t++)
        slot_file[t] = slot_entry[t] = -1;
    for (int f = 0; f < n_files; f++) {
        struct shard *s = &sh[f];
        if (io_src_file(&s->src, files[f], err) ||
            st_header_read(&s->src, names[f], &s->text, &s->hlen, &s->data_len, err) ||
            st_parse_header(s->text, s->hlen, s->data_len, classify, (void *)&w.model, "this model", &s->e, &s->n,
                            err) ||
            st_check_coverage(s->e, s->n, s->data_len, err) ||
            take_entries(&w.model, &w, s->e, s->n, f, slot_file, slot_entry, names[f], err)) {
            io_fail_in(err, names[f]);
            goto out;
        }
    }
    for (int t = 0; t < w.n_tensors; t++)
        if (slot_file[t] < 0 && !is_tied_head(&w.model, &w, t)) {
            hf_name(&w.model, t, name, sizeof name);
            kern_fail(err, "safetensors: tensor %s is missing%s", name, w.tensors[t].offset == w.off_head
                      ? " (the model's head is untied: give tie_embeddings true if the file ties it)" : "");
            goto out;
        }
    /* Only now is every tensor known to be in a file in its shape, so the
     * buffer is bounded by the files' sizes. */
    if (!(p = malloc(w.n_params * sizeof *p))) {
        kern_fail(err, "safetensors: out of memory for %zu parameters", w.n_params);
        goto out;
    }
    for (int t = 0; t < w.n_tensors; t++) {
        const struct kern_tensor *k = &w.tensors[t];
        if (slot_file[t] < 0)
            continue;
        const struct shard *s = &sh[slot_file[t]];
        const struct st_entry *x = &s->e[slot_entry[t]];
        if (io_read_floats(&s->src, 8 + s->hlen + x->begin, (enum io_dtype)x->dtype, k->count, p + k->offset,
                           x->name, err)) {
            io_fail_in(err, names[slot_file[t]]);
            goto out;
        }
    }
    if (w.model.tied) {   /* the head is wte; a file that stores it must store the same */
        size_t vc = (size_t)m->vocab * (size_t)m->d_model;
        int head = -1;
        for (int t = 0; t < w.n_tensors; t++)
            head = w.tensors[t].offset == w.off_head ? t : head;
        if (slot_file[head] >= 0 && memcmp(p + w.off_head, p + w.off_wte, vc * sizeof *p) != 0) {
            kern_fail(err, "safetensors: the model ties its head to the embedding, but lm_head.weight differs from "
                      "the embedding; give tie_embeddings false");
            goto out;
        }
        memcpy(p + w.off_head, p + w.off_wte, vc * sizeof *p);
    }
    *params = p;
    p = NULL;
    rc = 0;
out:
    for (int f = 0; f < n_files; f++) {
        free(sh[f].text);
        free(sh[f].e);
    }
    free(sh);
    free(slot_file);
    free(slot_entry);
    free(p);
    io_layout_free(&w);
    return rc;
}

int kern_hf_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    return kern_hf_write_as(f, m, params, 0, err);
}

int kern_hf_write_as(FILE *f, const struct model_config *m, const float *params, int bf16, struct kern_err *err)
{
    struct kern_stage w;
    struct st_out *out = NULL;
    int rc = -1, n = 0;

    if (io_layout(m, 0, m->layers, &w, err))
        return io_fail_in(err, "safetensors export");
    for (int s = 0; s < MODEL_PARTS; s++)
        for (int i = 0; i < model_families[m->arch].n_tensors[s]; i++)
            if (!model_families[m->arch].tensors[s][i].hf) {
                kern_fail(err, "safetensors export: architecture \"%s\" is written by its own writer",
                          model_families[m->arch].name);
                goto out;
            }
    if (!(out = calloc((size_t)w.n_tensors, sizeof *out))) {
        kern_fail(err, "safetensors export: out of memory");
        goto out;
    }
    for (int t = 0; t < w.n_tensors; t++) {
        const struct kern_tensor *k = &w.tensors[t];
        if (is_tied_head(&w.model, &w, t))
            continue;   /* save_pretrained leaves a tied head out */
        hf_name(&w.model, t, out[n].name, sizeof out[n].name);
        out[n].ndim = k->rows == 1 ? 1 : 2;
        out[n].rows = (uint64_t)k->rows;
        out[n].cols = (uint64_t)k->cols;
        out[n].data = params + k->offset;
        n++;
    }
    rc = st_write(f, out, n, bf16, "safetensors export", err);
out:
    free(out);
    io_layout_free(&w);
    return rc;
}

int kern_hf_index_read(const char *text, size_t len, struct kern_hf_index *ix, struct kern_err *err)
{
    static const char what[] = "model.safetensors.index.json";
    const char *name, *file;
    json_t *v, *map;
    int rc = -1;
    json_t *root = hj_parse_object(text, len, what, err);
    memset(ix, 0, sizeof *ix);
    if (!root)
        return -1;
    if (!(map = json_object_get(root, "weight_map")) || !json_is_object(map)) {
        kern_fail(err, "%s: no weight_map naming a shard", what);
        goto out;
    }
    json_object_foreach(map, name, v) {
        if (hj_string(v, what, "a weight_map entry", &file, err))
            goto out;
        if (!file[0] || strlen(file) >= KERN_HF_FILE_MAX || strchr(file, '/') || strcmp(file, ".") == 0 ||
            strcmp(file, "..") == 0) {
            kern_fail(err, "%s: tensor '%s' is in '%s', which is not a file name beside the index", what, name,
                      file);
            goto out;
        }
        int k = 0;
        while (k < ix->n_files && strcmp(ix->files[k], file) != 0)
            k++;
        if (k == ix->n_files) {
            if (ix->n_files == KERN_HF_FILES_MAX) {
                kern_fail(err, "%s: more than %d shard files", what, KERN_HF_FILES_MAX);
                goto out;
            }
            snprintf(ix->files[ix->n_files++], KERN_HF_FILE_MAX, "%s", file);
        }
        ix->n_names++;
    }
    if (ix->n_files == 0) {
        kern_fail(err, "%s: no weight_map naming a shard", what);
        goto out;
    }
    rc = 0;
out:
    if (rc)
        memset(ix, 0, sizeof *ix);
    json_decref(root);
    return rc;
}
