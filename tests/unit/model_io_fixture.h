/* model_io_fixture.h - test_model_io.c's own, independent view of GPT-2's
 * weights: a formula for every value (in Hugging Face's names and
 * orientation), the same values in shoal's flat layout found by tensor
 * name, writers of llm.c and safetensors files that share no code with
 * kernels/, a minimal safetensors reader, and a GPT-2 forward in double
 * that follows Hugging Face's semantics (Conv1D: y = x W, W (in, out)).
 * Include after cmocka.h. */
#ifndef SHOAL_TEST_MODEL_IO_FIXTURE_H
#define SHOAL_TEST_MODEL_IO_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "../../kernels/kernels.h"
#include "bytes_fixture.h"

/* The tensors of GPT-2, in llm.c's order (and shoal's within a block). */
enum tk { TK_WTE, TK_WPE, TK_LN1W, TK_LN1B, TK_QKVW, TK_QKVB, TK_ATTPROJW, TK_ATTPROJB, TK_LN2W, TK_LN2B,
          TK_FCW, TK_FCB, TK_FCPROJW, TK_FCPROJB, TK_LNFW, TK_LNFB, TK_HEAD, TK_N };
static const struct {
    const char *hf;    /* Hugging Face name, after "h.N." for block tensors */
    const char *shoal; /* shoal's name, after "hN." */
    int block;         /* 1: one per block */
    int conv1d;        /* stored (in, out) by Hugging Face */
    int rows_c, cols_c; /* HF shape in units of C (rows_c 0: a vector); wte/wpe/head: special */
} tk[TK_N] = {
    [TK_WTE] = {"wte.weight", "wte", 0, 0, -1, 1},       [TK_WPE] = {"wpe.weight", "wpe", 0, 0, -2, 1},
    [TK_LN1W] = {"ln_1.weight", "ln1w", 1, 0, 0, 1},     [TK_LN1B] = {"ln_1.bias", "ln1b", 1, 0, 0, 1},
    [TK_QKVW] = {"attn.c_attn.weight", "qkvw", 1, 1, 1, 3}, [TK_QKVB] = {"attn.c_attn.bias", "qkvb", 1, 0, 0, 3},
    [TK_ATTPROJW] = {"attn.c_proj.weight", "attprojw", 1, 1, 1, 1},
    [TK_ATTPROJB] = {"attn.c_proj.bias", "attprojb", 1, 0, 0, 1},
    [TK_LN2W] = {"ln_2.weight", "ln2w", 1, 0, 0, 1},     [TK_LN2B] = {"ln_2.bias", "ln2b", 1, 0, 0, 1},
    [TK_FCW] = {"mlp.c_fc.weight", "fcw", 1, 1, 1, 4},   [TK_FCB] = {"mlp.c_fc.bias", "fcb", 1, 0, 0, 4},
    [TK_FCPROJW] = {"mlp.c_proj.weight", "fcprojw", 1, 1, 4, 1},
    [TK_FCPROJB] = {"mlp.c_proj.bias", "fcprojb", 1, 0, 0, 1},
    [TK_LNFW] = {"ln_f.weight", "lnfw", 0, 0, 0, 1},     [TK_LNFB] = {"ln_f.bias", "lnfb", 0, 0, 0, 1},
    [TK_HEAD] = {"lm_head.weight", "head", 0, 0, -1, 1},
};

/* HF shape of kind k: (rows, cols), rows 0 for a vector of cols. */
static void hf_shape(const struct model_config *m, int k, size_t *rows, size_t *cols)
{
    size_t C = (size_t)m->d_model;
    int r = tk[k].rows_c;
    *rows = r == -1 ? (size_t)m->vocab : r == -2 ? (size_t)m->context : (size_t)r * C;
    *cols = (size_t)tk[k].cols_c * C;
}

static size_t hf_count(const struct model_config *m, int k)
{
    size_t r, c;
    hf_shape(m, k, &r, &c);
    return r ? r * c : c;
}

/* Element i (row-major, HF layout) of kind k in block l.  Every value is a
 * multiple of 1/256 below 1 in magnitude with at most 8 significant bits,
 * so fp32, fp16 and bf16 hold it exactly.  LayerNorm weights lie in
 * [0.5, 1).  A tied head is wte. */
static float hf_value(int k, int l, size_t i, int tied)
{
    if (k == TK_HEAD && tied)
        k = TK_WTE;
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull ^ (uint64_t)(l + 1) * 0xC2B2AE3D27D4EB4Full ^
                 ((uint64_t)i + 7) * 0x165667B19E3779F9ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    int v = (int)(x % 127);
    if (k == TK_LN1W || k == TK_LN2W || k == TK_LNFW)
        return (float)(129 + v) / 256.0f;
    return (float)(v - 63) / 256.0f;
}

/* The value at (r, c) of kind k as shoal stores it: (out, in), so a
 * Conv1D weight's element (r, c) is HF's (c, r). */
static float shoal_value(const struct model_config *m, int k, int l, size_t r, size_t c, int tied)
{
    size_t hr, hc;
    hf_shape(m, k, &hr, &hc);
    if (!hr)
        return hf_value(k, l, c, tied);
    return tk[k].conv1d ? hf_value(k, l, c * hc + r, tied) : hf_value(k, l, r * hc + c, tied);
}

/* Kind and block of a shoal tensor name ("h2.qkvw", "lnfw"). */
static int shoal_kind(const char *name, int *layer)
{
    *layer = 0;
    const char *dot = strchr(name, '.');
    if (name[0] == 'h' && dot) {
        char *end = NULL;
        long l = strtol(name + 1, &end, 10);
        if (end != dot || l < 0 || l > INT_MAX)
            fail_msg("bad block number in %s", name);
        *layer = (int)l;
        name = dot + 1;
    }
    for (int k = 0; k < TK_N; k++)
        if (strcmp(name, tk[k].shoal) == 0 && tk[k].block == (dot != NULL))
            return k;
    fail_msg("unknown shoal tensor %s", name);
    return -1;
}

/* The formula's whole model in shoal's layout, tensor by tensor through
 * the stage's own table (kern_stage_tensor): what kern_stage_write puts in
 * a stage when the weights are written into it directly. */
static float *formula_params(struct kern_stage *whole, int tied)
{
    const struct model_config *m = kern_stage_model(whole);
    float *p = malloc(kern_stage_param_count(whole) * sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < kern_stage_tensor_count(whole); i++) {
        const struct kern_tensor *t = kern_stage_tensor(whole, i);
        int l, k = shoal_kind(t->name, &l);
        for (int r = 0; r < t->rows; r++)
            for (int c = 0; c < t->cols; c++)
                p[t->offset + (size_t)r * t->cols + c] = shoal_value(m, k, l, (size_t)r, (size_t)c, tied);
    }
    return p;
}

/* ---- bytes (bytes_fixture.h) ------------------------------------------ */

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the formula's values */
}

/* fp32 to fp16 for the formula's values (normal, exact: |x| < 1, 8 bits). */
static uint16_t to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) == 0)
        return (uint16_t)(u >> 16);
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    assert_true(e > 0 && e < 31 && (u & 0x1fff) == 0);
    return (uint16_t)(((u >> 16) & 0x8000) | ((uint32_t)e << 10) | ((u >> 13) & 0x3ff));
}

/* dtype: 0 F32, 1 F16, 2 BF16 */
static void put_value(struct bytes *b, float v, int dtype)
{
    if (dtype == 0) {
        put_bytes(b, &v, 4);
    } else {
        uint16_t h = dtype == 1 ? to_f16(v) : to_bf16(v);
        put_bytes(b, &h, 2);
    }
}

/* ---- llm.c ------------------------------------------------------------ */

/* An llm.c checkpoint of the formula: header, then wte (Vp rows, the
 * padding filled with `pad`), wpe, each block tensor for all L blocks
 * ((out, in) as llm.c's nn.Linear holds them), lnfw, lnfb.  bf16: version 5. */
static struct bytes llmc_file(const struct model_config *m, int Vp, int bf16, float pad)
{
    struct bytes b = {0};
    int32_t h[256] = {20240326, bf16 ? 5 : 3, m->context, m->vocab, m->layers, m->heads, m->d_model, Vp};
    put_bytes(&b, h, sizeof h);
    for (int k = TK_WTE; k <= TK_LNFB; k++)
        for (int l = 0; l < (tk[k].block ? m->layers : 1); l++) {
            size_t hr, hc;
            hf_shape(m, k, &hr, &hc);
            size_t rows = !hr ? 1 : tk[k].conv1d ? hc : hr, cols = !hr ? hc : tk[k].conv1d ? hr : hc;
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    put_value(&b, shoal_value(m, k, l, r, c, 1), bf16 ? 2 : 0);
            for (size_t r = k == TK_WTE ? (size_t)m->vocab : 0; k == TK_WTE && r < (size_t)Vp; r++)
                for (size_t c = 0; c < cols; c++)
                    put_value(&b, pad, bf16 ? 2 : 0);
        }
    return b;
}

/* ---- safetensors ------------------------------------------------------ */

#define ST_MAX 128
struct st_entry {
    char name[96];
    char dtype[8];
    int ndim;
    uint64_t dim[4];
    uint64_t begin, end;
};
struct st_file {
    struct st_entry e[ST_MAX];
    int n;
    struct bytes data;
};

struct st_opts {
    int prefix;        /* "transformer." names */
    int lm_head;       /* write lm_head.weight (the formula's untied head) */
    int dtype;         /* 0 F32, 1 F16, 2 BF16 */
    int masks;         /* the h.N.attn.bias / masked_bias buffers of older files */
    int reverse;       /* data in the reverse order of the header */
    const char *skip;  /* a tensor (HF name without prefix) left out, data and all */
    const char *dup;   /* a tensor written twice, with and without the prefix */
};

static void st_add(struct st_file *f, const char *name, const char *dtype, int ndim, const uint64_t *dim,
                   const struct bytes *data)
{
    assert_true(f->n < ST_MAX);
    struct st_entry *e = &f->e[f->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        e->dim[d] = dim[d];
    e->begin = f->data.n;
    put_bytes(&f->data, data->p, data->n);
    e->end = f->data.n;
}

/* One tensor of the formula in HF's layout and name. */
static void st_tensor(struct st_file *f, const struct model_config *m, const struct st_opts *o, int k, int l,
                      int prefixed)
{
    static const char *const dtypes[] = {"F32", "F16", "BF16"};
    char hf[64], name[96];
    size_t hr, hc;
    struct bytes b = {0};
    hf_shape(m, k, &hr, &hc);
    if (tk[k].block)
        snprintf(hf, sizeof hf, "h.%d.%s", l, tk[k].hf);
    else
        snprintf(hf, sizeof hf, "%s", tk[k].hf);
    if (o->skip && strcmp(o->skip, hf) == 0)
        return;
    snprintf(name, sizeof name, "%s%s", prefixed && k != TK_HEAD ? "transformer." : "", hf);
    for (size_t i = 0; i < hf_count(m, k); i++)
        put_value(&b, hf_value(k, l, i, !o->lm_head), o->dtype);
    uint64_t dim[2] = {hr ? hr : hc, hc};
    st_add(f, name, dtypes[o->dtype], hr ? 2 : 1, dim, &b);
    if (o->dup && strcmp(o->dup, hf) == 0 && prefixed == o->prefix)
        st_tensor(f, m, &(struct st_opts){.dtype = o->dtype, .lm_head = o->lm_head}, k, l, !prefixed);
    free(b.p);
}

static struct st_file *st_build(const struct model_config *m, const struct st_opts *o)
{
    struct st_file *f = calloc(1, sizeof *f);
    assert_non_null(f);
    for (int k = 0; k < TK_N; k++) {
        if (k == TK_HEAD && !o->lm_head)
            continue;
        for (int l = 0; l < (tk[k].block ? m->layers : 1); l++) {
            st_tensor(f, m, o, k, l, o->prefix);
            if (o->masks && k == TK_FCPROJB) { /* (1,1,T,T) lower triangle, and a scalar */
                char name[96];
                struct bytes b = {0};
                size_t T = (size_t)m->context;
                for (size_t i = 0; i < T * T; i++)
                    put_value(&b, (i % T) <= (i / T) ? 1.0f : 0.0f, 0);
                snprintf(name, sizeof name, "%sh.%d.attn.bias", o->prefix ? "transformer." : "", l);
                st_add(f, name, "F32", 4, (uint64_t[]){1, 1, T, T}, &b);
                b.n = 0;
                put_value(&b, -1e4f, 0);
                snprintf(name, sizeof name, "%sh.%d.attn.masked_bias", o->prefix ? "transformer." : "", l);
                st_add(f, name, "F32", 0, NULL, &b);
                free(b.p);
            }
        }
    }
    if (o->reverse) { /* the same bytes of each tensor, laid out back to front */
        struct bytes d = {0};
        for (int i = f->n - 1; i >= 0; i--) {
            uint64_t len = f->e[i].end - f->e[i].begin, at = d.n;
            put_bytes(&d, f->data.p + f->e[i].begin, len);
            f->e[i].begin = at;
            f->e[i].end = at + len;
        }
        free(f->data.p);
        f->data = d;
    }
    return f;
}

/* The file: size, header padded to 8 bytes, data.  header_len: when not
 * NULL, the value written in the size field instead of the true one. */
static struct bytes st_serialize(const struct st_file *f, const uint64_t *header_len)
{
    struct bytes h = {0}, out = {0};
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"__metadata__\":{\"format\":\"pt\"}");
    put_bytes(&h, buf, (size_t)n);
    for (int i = 0; i < f->n; i++) {
        const struct st_entry *e = &f->e[i];
        n = snprintf(buf, sizeof buf, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e->name, e->dtype);
        for (int d = 0; d < e->ndim; d++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%llu", d ? "," : "", (unsigned long long)e->dim[d]);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "],\"data_offsets\":[%llu,%llu]}",
                      (unsigned long long)e->begin, (unsigned long long)e->end);
        put_bytes(&h, buf, (size_t)n);
    }
    put_bytes(&h, "}", 1);
    while (h.n % 8)
        put_bytes(&h, " ", 1);
    uint64_t len = header_len ? *header_len : h.n;
    put_bytes(&out, &len, 8);
    put_bytes(&out, h.p, h.n);
    put_bytes(&out, f->data.p, f->data.n);
    free(h.p);
    return out;
}

static struct st_entry *st_find(struct st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0)
            return &f->e[i];
    fail_msg("no tensor %s in the test's file", name);
    return NULL;
}

static void st_free(struct st_file *f)
{
    free(f->data.p);
    free(f);
}

/* A minimal safetensors reader (stdlib only) for what kernels' writer
 * produces: the header, compact, in the writer's member order.  Fills
 * f's entries (begin/end relative to the data) and returns the offset of
 * the data in the file. */
static size_t st_parse(const unsigned char *file, size_t size, struct st_file *f)
{
    uint64_t hlen;
    assert_true(size >= 8);
    memcpy(&hlen, file, 8);
    assert_true(hlen % 8 == 0 && 8 + hlen <= size);
    char *text = malloc(hlen + 1);
    assert_non_null(text);
    memcpy(text, file + 8, hlen);
    text[hlen] = '\0';
    const char *meta = "{\"__metadata__\":{\"format\":\"pt\"}";
    assert_memory_equal(text, meta, strlen(meta));
    const char *p = text + strlen(meta);
    f->n = 0;
    while (*p == ',') {
        struct st_entry *e = &f->e[f->n++];
        int used = 0;
        assert_true(f->n <= ST_MAX);
        assert_int_equal(sscanf(p, ",\"%95[^\"]\":{\"dtype\":\"%7[^\"]\",\"shape\":[%n", e->name, e->dtype, &used), 2);
        assert_true(used > 0);
        p += used;
        e->ndim = 0;
        while (*p != ']') {
            assert_true(e->ndim < 4);
            char *end;
            e->dim[e->ndim++] = strtoull(p, &end, 10);
            assert_true(end > p);
            p = *end == ',' ? end + 1 : end;
        }
        unsigned long long b, en;
        used = 0;
        assert_int_equal(sscanf(p, "],\"data_offsets\":[%llu,%llu]}%n", &b, &en, &used), 2);
        assert_true(used > 0);
        p += used;
        e->begin = b;
        e->end = en;
    }
    assert_int_equal(*p, '}');
    for (p++; *p; p++)
        assert_int_equal(*p, ' ');
    free(text);
    return 8 + (size_t)hlen;
}

/* ---- a GPT-2 forward in double, Hugging Face's way -------------------- */

/* W of kind k, block l, in HF's layout, element (r, c) (vectors: c). */
static double W(const struct model_config *m, int k, int l, size_t r, size_t c, int tied)
{
    size_t hr, hc;
    hf_shape(m, k, &hr, &hc);
    return hf_value(k, l, hr ? r * hc + c : c, tied);
}

static void ref_layernorm(const struct model_config *m, const double *x, double *out, int kw, int kb, int l, int T)
{
    int C = m->d_model;
    for (int t = 0; t < T; t++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += x[t * C + c] / C;
        for (int c = 0; c < C; c++)
            var += (x[t * C + c] - mean) * (x[t * C + c] - mean) / C;
        for (int c = 0; c < C; c++)
            out[t * C + c] = (x[t * C + c] - mean) / sqrt(var + 1e-5) * W(m, kw, l, 0, (size_t)c, 0) +
                             W(m, kb, l, 0, (size_t)c, 0);
    }
}

/* Conv1D: out (T, OC) = in (T, IC) W (IC, OC) + b. */
static void ref_conv1d(const struct model_config *m, const double *in, double *out, int kw, int kb, int l, int T,
                       int IC, int OC)
{
    for (int t = 0; t < T; t++)
        for (int o = 0; o < OC; o++) {
            double s = W(m, kb, l, 0, (size_t)o, 0);
            for (int i = 0; i < IC; i++)
                s += in[t * IC + i] * W(m, kw, l, (size_t)i, (size_t)o, 0);
            out[t * OC + o] = s;
        }
}

/* logits (T, V) of one sequence of tokens. */
static void ref_forward(const struct model_config *m, const int32_t *tok, int T, int tied, double *logits)
{
    int C = m->d_model, NH = m->heads, hs = C / NH;
    double *x = calloc((size_t)T * C, sizeof *x), *ln = calloc((size_t)T * C, sizeof *ln),
           *qkv = calloc((size_t)T * 3 * C, sizeof *qkv), *y = calloc((size_t)T * C, sizeof *y),
           *h = calloc((size_t)T * 4 * C, sizeof *h), *o = calloc((size_t)T * C, sizeof *o);
    assert_true(x && ln && qkv && y && h && o);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            x[t * C + c] = W(m, TK_WTE, 0, (size_t)tok[t], (size_t)c, 0) + W(m, TK_WPE, 0, (size_t)t, (size_t)c, 0);
    for (int l = 0; l < m->layers; l++) {
        ref_layernorm(m, x, ln, TK_LN1W, TK_LN1B, l, T);
        ref_conv1d(m, ln, qkv, TK_QKVW, TK_QKVB, l, T, C, 3 * C);
        for (int hd = 0; hd < NH; hd++)
            for (int t = 0; t < T; t++) {
                double a[64], max = -1e300, sum = 0;
                for (int s = 0; s <= t; s++) {
                    a[s] = 0;
                    for (int i = 0; i < hs; i++)
                        a[s] += qkv[t * 3 * C + hd * hs + i] * qkv[s * 3 * C + C + hd * hs + i];
                    a[s] /= sqrt((double)hs);
                    max = a[s] > max ? a[s] : max;
                }
                for (int s = 0; s <= t; s++)
                    sum += (a[s] = exp(a[s] - max));
                for (int i = 0; i < hs; i++) {
                    double v = 0;
                    for (int s = 0; s <= t; s++)
                        v += a[s] / sum * qkv[s * 3 * C + 2 * C + hd * hs + i];
                    y[t * C + hd * hs + i] = v;
                }
            }
        ref_conv1d(m, y, o, TK_ATTPROJW, TK_ATTPROJB, l, T, C, C);
        for (int i = 0; i < T * C; i++)
            x[i] += o[i];
        ref_layernorm(m, x, ln, TK_LN2W, TK_LN2B, l, T);
        ref_conv1d(m, ln, h, TK_FCW, TK_FCB, l, T, C, 4 * C);
        for (int i = 0; i < T * 4 * C; i++)
            h[i] = 0.5 * h[i] * (1 + tanh(sqrt(2 / M_PI) * (h[i] + 0.044715 * h[i] * h[i] * h[i])));
        ref_conv1d(m, h, o, TK_FCPROJW, TK_FCPROJB, l, T, 4 * C, C);
        for (int i = 0; i < T * C; i++)
            x[i] += o[i];
    }
    ref_layernorm(m, x, ln, TK_LNFW, TK_LNFB, 0, T);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < m->vocab; v++) { /* nn.Linear: head (V, C) */
            double s = 0;
            for (int c = 0; c < C; c++)
                s += ln[t * C + c] * W(m, TK_HEAD, 0, (size_t)v, (size_t)c, tied);
            logits[t * m->vocab + v] = s;
        }
    free(x), free(ln), free(qkv), free(y), free(h), free(o);
}

#endif
