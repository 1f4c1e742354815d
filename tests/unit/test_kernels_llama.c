/* test_kernels_llama.c - a Llama stage on the CPU against a Llama written
 * here, in double, from the published equations (LlamaForCausalLM:
 * RMSNorm, rotate_half RoPE with Llama 3's frequency scaling, grouped-query
 * attention, SwiGLU, no biases): logits, loss, and every tensor's gradient
 * (central differences of that forward at sampled elements); stages split
 * bit for bit; a tied head; stage files of the family.  Shapes: grouped
 * (kv 2 of 4 heads), one kv head, and multi-head with an odd head count.
 * The families of the same kind the same way, each from its own
 * equations: Qwen2 (Qwen2ForCausalLM: q, k, v biases), Qwen3
 * (Qwen3ForCausalLM: an RMSNorm of each q and k head before the rotation,
 * head_dim other than C / NH), OLMo-2 (Olmo2ForCausalLM: q and k
 * normalised over their whole width, the block's norms after the attention
 * and the MLP inside the residual). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels_fixture.h"

/* ---- the reference, in double ------------------------------------------ */

struct ref {
    const struct model_config *m;
    int B, T;
    const int32_t *tok, *tgt;
    double *p;                 /* the whole model's parameters, the stage's layout */
    const struct kern_stage *layout;   /* where each tensor is */
};

static double *ref_tensor(const struct ref *r, const char *name)
{
    const struct kern_tensor *t = find_tensor((struct kern_stage *)r->layout, name);
    if (!t)
        fail_msg("no tensor %s", name);
    return r->p + t->offset;
}

static double *ref_block(const struct ref *r, int l, const char *what)
{
    char name[32];
    snprintf(name, sizeof name, "h%d.%s", l, what);
    return ref_tensor(r, name);
}

/* y (n) = W (rows, n_in) x */
static void linear(double *y, const double *W, const double *x, int rows, int n_in)
{
    for (int o = 0; o < rows; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++)
            s += W[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static void rmsnorm(double *y, const double *x, const double *w, int C, double eps)
{
    double ss = 0;
    for (int i = 0; i < C; i++)
        ss += x[i] * x[i];
    double r = 1 / sqrt(ss / C + eps);
    for (int i = 0; i < C; i++)
        y[i] = w[i] * x[i] * r;
}

/* The head size: the config's head_dim, else hidden_size / heads (as
 * transformers' getattr(config, "head_dim", hidden // heads)). */
static int ref_hd(const struct model_config *m)
{
    return m->head_dim ? m->head_dim : m->d_model / m->heads;
}

/* Llama 3's scaled inverse frequency, written from the config's fields as
 * transformers' _compute_llama3_parameters does. */
static double inv_freq(const struct model_config *m, int i)
{
    int hd = ref_hd(m);
    double inv = 1.0 / pow(m->rope_theta, (2.0 * i) / hd);
    const struct model_rope_scaling *s = &m->rope_scaling;
    if (s->factor == 0)
        return inv;
    double low_wl = s->original_context / s->low_freq_factor, high_wl = s->original_context / s->high_freq_factor;
    double wl = 2 * M_PI / inv;
    double scaled = wl > low_wl ? inv / s->factor : inv;
    double smooth = (s->original_context / wl - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    int medium = !(wl < high_wl) && !(wl > low_wl);
    return medium ? (1 - smooth) * scaled / s->factor + smooth * scaled : scaled;
}

/* q' = q cos + rotate_half(q) sin, rotate_half(x) = cat(-x2, x1). */
static void rope(double *x, int pos, const struct model_config *m)
{
    int hd = ref_hd(m), half = hd / 2;
    double y[512];
    for (int i = 0; i < hd; i++) {
        int j = i % half;
        double a = pos * inv_freq(m, j), rot = i < half ? -x[i + half] : x[i - half];
        y[i] = x[i] * cos(a) + rot * sin(a);
    }
    memcpy(x, y, (size_t)hd * sizeof *x);
}

/* The mean cross-entropy over B*T tokens; logits (B,T,V) when not NULL. */
static double ref_forward(const struct ref *r, double *logits_out)
{
    const struct model_config *m = r->m;
    int B = r->B, T = r->T, C = m->d_model, V = m->vocab, NH = m->heads, KVH = m->kv_heads;
    int hd = ref_hd(m), Q = NH * hd, KV = KVH * hd, F = m->ffn_dim, BT = B * T;
    /* Qwen2: q_proj, k_proj, v_proj with bias=True; Qwen3: q_norm, k_norm
     * (Qwen3RMSNorm(head_dim)) on q and k viewed as (.., heads, head_dim) */
    int qkv_bias = m->arch == MODEL_QWEN2, head_norm = m->arch == MODEL_QWEN3;
    /* OLMo-2: q_norm, k_norm (Olmo2RMSNorm(heads * head_dim), (kv_heads *
     * head_dim)) on the whole projections; no norm before the attention or
     * the MLP, post_attention_layernorm and post_feedforward_layernorm on
     * their outputs, inside the residual */
    int width_norm = m->arch == MODEL_OLMO2, post = m->arch == MODEL_OLMO2;
    double *x = calloc((size_t)BT * C, sizeof *x), *n = calloc((size_t)BT * C, sizeof *n);
    double *q = calloc((size_t)BT * Q, sizeof *q), *k = calloc((size_t)BT * KV, sizeof *k);
    double *v = calloc((size_t)BT * KV, sizeof *v), *att = calloc((size_t)BT * Q, sizeof *att);
    double *tmp = calloc((size_t)(F > C ? F : C) * 3, sizeof *tmp), *logits = calloc((size_t)V, sizeof *logits);
    double loss = 0;
    assert_true(x && n && q && k && v && att && tmp && logits);
    const double *wte = ref_tensor(r, "wte");
    for (int i = 0; i < BT; i++)
        memcpy(x + (size_t)i * C, wte + (size_t)r->tok[i] * C, (size_t)C * sizeof *x);
    for (int l = 0; l < m->layers; l++) {
        for (int i = 0; i < BT; i++) {
            if (post)
                memcpy(n + (size_t)i * C, x + (size_t)i * C, (size_t)C * sizeof *n);
            else
                rmsnorm(n + (size_t)i * C, x + (size_t)i * C, ref_block(r, l, "ln1w"), C, m->norm_eps);
            double *qi = q + (size_t)i * Q, *ki = k + (size_t)i * KV, *vi = v + (size_t)i * KV;
            linear(qi, ref_block(r, l, "qw"), n + (size_t)i * C, Q, C);
            linear(ki, ref_block(r, l, "kw"), n + (size_t)i * C, KV, C);
            linear(vi, ref_block(r, l, "vw"), n + (size_t)i * C, KV, C);
            for (int j = 0; qkv_bias && j < Q; j++)
                qi[j] += ref_block(r, l, "qb")[j];
            for (int j = 0; qkv_bias && j < KV; j++)
                ki[j] += ref_block(r, l, "kb")[j], vi[j] += ref_block(r, l, "vb")[j];
            for (int h = 0; head_norm && h < NH; h++)
                rmsnorm(qi + h * hd, qi + h * hd, ref_block(r, l, "qnormw"), hd, m->norm_eps);
            for (int h = 0; head_norm && h < KVH; h++)
                rmsnorm(ki + h * hd, ki + h * hd, ref_block(r, l, "knormw"), hd, m->norm_eps);
            if (width_norm) {
                rmsnorm(qi, qi, ref_block(r, l, "qnormw"), Q, m->norm_eps);
                rmsnorm(ki, ki, ref_block(r, l, "knormw"), KV, m->norm_eps);
            }
            for (int h = 0; h < NH; h++)
                rope(qi + h * hd, i % T, m);
            for (int h = 0; h < KVH; h++)
                rope(ki + h * hd, i % T, m);
        }
        /* causal attention; query head h reads kv head h / (NH / KVH); with
         * a sliding window W, position t reads positions (t - W, t] */
        int W = m->sliding_window > 0 ? m->sliding_window : T;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    int g = h / (NH / KVH);
                    const double *qt = q + ((size_t)b * T + t) * Q + h * hd;
                    double s[512], max = -INFINITY, sum = 0;
                    for (int u = t - W + 1 > 0 ? t - W + 1 : 0; u <= t; u++) {
                        const double *ku = k + ((size_t)b * T + u) * KV + g * hd;
                        double d = 0;
                        for (int i = 0; i < hd; i++)
                            d += qt[i] * ku[i];
                        s[u] = d / sqrt((double)hd);
                        max = s[u] > max ? s[u] : max;
                    }
                    for (int u = t - W + 1 > 0 ? t - W + 1 : 0; u <= t; u++)
                        sum += (s[u] = exp(s[u] - max));
                    double *o = att + ((size_t)b * T + t) * Q + h * hd;
                    for (int i = 0; i < hd; i++) {
                        double acc = 0;
                        for (int u = t - W + 1 > 0 ? t - W + 1 : 0; u <= t; u++)
                            acc += s[u] / sum * v[((size_t)b * T + u) * KV + g * hd + i];
                        o[i] = acc;
                    }
                }
        for (int i = 0; i < BT; i++) {
            double *xi = x + (size_t)i * C, *ni = n + (size_t)i * C, *g = tmp, *u = tmp + F, *d = tmp + 2 * F;
            linear(d, ref_block(r, l, "ow"), att + (size_t)i * Q, C, Q);
            if (post)
                rmsnorm(d, d, ref_block(r, l, "ln1w"), C, m->norm_eps);
            for (int c = 0; c < C; c++)
                xi[c] += d[c];
            if (post)
                memcpy(ni, xi, (size_t)C * sizeof *ni);
            else
                rmsnorm(ni, xi, ref_block(r, l, "ln2w"), C, m->norm_eps);
            linear(g, ref_block(r, l, "gatew"), ni, F, C);
            linear(u, ref_block(r, l, "upw"), ni, F, C);
            for (int f = 0; f < F; f++)
                g[f] = g[f] / (1 + exp(-g[f])) * u[f];
            linear(d, ref_block(r, l, "downw"), g, C, F);
            if (post)
                rmsnorm(d, d, ref_block(r, l, "ln2w"), C, m->norm_eps);
            for (int c = 0; c < C; c++)
                xi[c] += d[c];
        }
    }
    for (int i = 0; i < BT; i++) {
        rmsnorm(n + (size_t)i * C, x + (size_t)i * C, ref_tensor(r, "lnfw"), C, m->norm_eps);
        linear(logits, ref_tensor(r, "head"), n + (size_t)i * C, V, C);
        if (logits_out)
            memcpy(logits_out + (size_t)i * V, logits, (size_t)V * sizeof *logits);
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            max = logits[j] > max ? logits[j] : max;
        for (int j = 0; j < V; j++)
            sum += exp(logits[j] - max);
        loss += -(logits[r->tgt[i]] - max - log(sum));
    }
    free(x), free(n), free(q), free(k), free(v), free(att), free(tmp), free(logits);
    return loss / BT;
}

/* ---- the shapes --------------------------------------------------------- */

static const struct model_config gqa = {.vocab = 67, .context = 16, .d_model = 32, .heads = 4, .layers = 2,
                                        .arch = MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 40, .rope_theta = 10000};
/* one kv head, a tied head, Llama 3 scaling that moves the middle
 * frequencies at these lengths */
static const struct model_config mqa_tied = {.vocab = 50, .context = 16, .d_model = 32, .heads = 4, .layers = 2,
                                             .arch = MODEL_LLAMA, .kv_heads = 1, .ffn_dim = 24, .tied = 1,
                                             .rope_theta = 500000, .norm_eps = 1e-6,
                                             .rope_scaling = {.factor = 8, .low_freq_factor = 1,
                                                              .high_freq_factor = 4, .original_context = 16}};
/* multi-head, three heads of 8 */
static const struct model_config mha_odd = {.vocab = 41, .context = 12, .d_model = 24, .heads = 3, .layers = 3,
                                            .arch = MODEL_LLAMA, .kv_heads = 3, .ffn_dim = 64,
                                            .rope_theta = 100000};

/* Qwen2: q, k, v biases, two kv heads of four */
static const struct model_config qwen2_gqa = {.vocab = 53, .context = 16, .d_model = 32, .heads = 4, .layers = 2,
                                              .arch = MODEL_QWEN2, .kv_heads = 2, .ffn_dim = 40,
                                              .rope_theta = 1000000, .norm_eps = 1e-6};
/* Qwen3: per-head q and k norms, heads of 12 where C / NH is 8 (q 48
 * wide, C 32), one kv head of four, tied */
static const struct model_config qwen3_hd = {.vocab = 47, .context = 16, .d_model = 32, .heads = 4, .layers = 2,
                                             .arch = MODEL_QWEN3, .kv_heads = 1, .ffn_dim = 24, .head_dim = 12,
                                             .tied = 1, .rope_theta = 1000000, .norm_eps = 1e-6};

/* OLMo-2: the norms after the attention and the MLP, q and k normalised
 * over their whole width; multi-head (as OLMo-2 1B), untied */
static const struct model_config olmo2_mha = {.vocab = 59, .context = 16, .d_model = 24, .heads = 3, .layers = 2,
                                              .arch = MODEL_OLMO2, .ffn_dim = 40, .rope_theta = 500000,
                                              .norm_eps = 1e-6};

/* Mistral's sliding window on Llama: 4 positions at T 11 (rows past the
 * third see fewer than all of those before them) */
static const struct model_config llama_window = {.vocab = 43, .context = 16, .d_model = 32, .heads = 4, .layers = 2,
                                                 .arch = MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 40,
                                                 .rope_theta = 10000, .sliding_window = 4};

static void fold_batch(const struct model_config *m, int B, int T, int k, int32_t *tok, int32_t *tgt)
{
    text_batch(B, T, k, tok, tgt);
    for (int i = 0; i < B * T; i++)
        tok[i] %= m->vocab, tgt[i] %= m->vocab;
}

/* Loss, logits and every tensor's gradient of a whole-model stage against
 * the reference: loss to 1e-6 relative, logits to 1e-5 of their largest,
 * each tensor's gradient (sampled) to 1e-5 of its largest. */
static void check_against_reference(const struct model_config *m)
{
    enum { B = 2, T = 11, SAMPLES = 12 };
    struct kern_err err;
    int32_t tok[B * T], tgt[B * T];
    fold_batch(m, B, T, 3, tok, tgt);
    struct kern_stage *st = stage_new(m, 0, m->layers, B, T, 1, 17);
    size_t n = kern_stage_param_count(st);
    /* perturb the weights away from init (norm weights off 1) */
    float *pf = read_buf(st, KERN_PARAMS);
    uint32_t s = 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        pf[i] += 0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    if (m->tied)   /* the shared matrix: both copies equal */
        memcpy(pf + find_tensor(st, "head")->offset, pf + find_tensor(st, "wte")->offset,
               find_tensor(st, "wte")->count * sizeof *pf);
    assert_int_equal(kern_stage_write(st, KERN_PARAMS, pf, &err), 0);

    float loss, dloss = 1.0f;
    assert_int_equal(kern_stage_zero_grad(st, &err), 0);
    assert_int_equal(kern_stage_forward(st, 0, tok, tgt, &loss, &err), 0);
    assert_int_equal(kern_stage_backward(st, 0, &dloss, NULL, &err), 0);
    assert_int_equal(kern_stage_tie_grads(st, &err), 0);
    float *gf = read_buf(st, KERN_GRADS);

    struct ref r = {.m = kern_stage_model(st), .B = B, .T = T, .tok = tok, .tgt = tgt, .layout = st};
    r.p = malloc(n * sizeof *r.p);
    assert_non_null(r.p);
    for (size_t i = 0; i < n; i++)
        r.p[i] = pf[i];
    double want = ref_forward(&r, NULL);
    print_message("%s %s kv=%d window=%d: loss %.9f, reference %.12f (%.2g relative)\n",
                  model_families[m->arch].name, m->tied ? "tied" : "untied", r.m->kv_heads, m->sliding_window, loss,
                  want, fabs(loss - want) / want);
    assert_true(fabs(loss - want) <= 1e-6 * want);

    /* logits */
    float *lf = malloc((size_t)B * T * m->vocab * sizeof *lf);
    double *ld = malloc((size_t)B * T * m->vocab * sizeof *ld), lmax = 0, lerr = 0;
    assert_true(lf && ld);
    assert_int_equal(kern_stage_logits(st, tok, lf, &err), 0);
    ref_forward(&r, ld);
    for (size_t i = 0; i < (size_t)B * T * m->vocab; i++) {
        lmax = fmax(lmax, fabs(ld[i]));
        lerr = fmax(lerr, fabs(lf[i] - ld[i]));
    }
    assert_true(lerr <= 1e-5 * lmax);

    /* every tensor's gradient: central differences of the reference */
    double worst_rel = 0;   /* the largest (off by) / (tensor's largest) */
    for (int ti = 0; ti < kern_stage_tensor_count(st); ti++) {
        const struct kern_tensor *t = kern_stage_tensor(st, ti);
        int shared = m->tied && (!strcmp(t->name, "wte") || !strcmp(t->name, "head"));
        size_t other = shared ? find_tensor(st, strcmp(t->name, "wte") ? "wte" : "head")->offset : 0;
        double gmax = 0, worst = 0;
        for (size_t i = 0; i < t->count; i++)
            gmax = fmax(gmax, fabs(gf[t->offset + i]));
        size_t stride = t->count > SAMPLES ? t->count / SAMPLES : 1;
        for (size_t i = 0; i < t->count; i += stride) {
            size_t at = t->offset + i;
            double keep = r.p[at], keep2 = shared ? r.p[other + i] : 0, h = 1e-5;
            r.p[at] = keep + h;
            if (shared)
                r.p[other + i] = keep2 + h;
            double fp = ref_forward(&r, NULL);
            r.p[at] = keep - h;
            if (shared)
                r.p[other + i] = keep2 - h;
            double fm = ref_forward(&r, NULL);
            r.p[at] = keep;
            if (shared)
                r.p[other + i] = keep2;
            worst = fmax(worst, fabs((fp - fm) / (2 * h) - gf[at]));
        }
        if (worst > 1e-5 * gmax + 1e-9)
            fail_msg("%s: gradient off the reference by %.3g (largest %.3g)", t->name, worst, gmax);
        worst_rel = gmax > 0 ? fmax(worst_rel, worst / gmax) : worst_rel;
    }
    print_message("  gradients off by at most %.2g of each tensor's largest\n", worst_rel);
    free(pf), free(gf), free(r.p), free(lf), free(ld);
    kern_stage_free(st);
}

static void test_matches_reference(void **state)
{
    (void)state;
    check_against_reference(&gqa);
    check_against_reference(&mqa_tied);
    check_against_reference(&mha_odd);
}

static void test_families_match_reference(void **state)
{
    (void)state;
    check_against_reference(&qwen2_gqa);
    check_against_reference(&qwen3_hd);
    check_against_reference(&olmo2_mha);
    check_against_reference(&llama_window);
}

/* The reference's inverse frequencies are model.c's: scaled below,
 * smoothed between and kept above the two wavelengths. */
static void test_rope_frequencies(void **state)
{
    (void)state;
    struct model_config m = {.d_model = 2048, .heads = 32, .arch = MODEL_LLAMA, .rope_theta = 500000,
                             .rope_scaling = {.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                                              .original_context = 8192}};
    int kept = 0, scaled = 0, smoothed = 0;
    for (int i = 0; i < 32; i++) {
        double got = model_rope_inv_freq(&m, i), want = inv_freq(&m, i), plain = pow(500000.0, -2.0 * i / 64);
        assert_true(fabs(got - want) <= 1e-15 * want);
        kept += got == plain, scaled += fabs(got - plain / 32) < 1e-18, smoothed += got < plain && got > plain / 32;
    }
    assert_true(kept > 0 && scaled > 0 && smoothed > 0);
}

/* Stages [0,1) + [1,3) equal [0,3) bit for bit: loss and every gradient,
 * three micro-batches in flight in GPipe order. */
static void test_split_equals_whole(void **state)
{
    (void)state;
    enum { B = 2, T = 9, M = 3 };
    const struct model_config *m = &mha_odd;
    struct kern_stage *whole = stage_new(m, 0, 3, B, T, M, 5), *s0 = stage_new(m, 0, 1, B, T, M, 5);
    struct kern_stage *s1 = stage_new(m, 1, 3, B, T, M, 5);
    int32_t tok[M][B * T], tgt[M][B * T];
    for (int k = 0; k < M; k++)
        fold_batch(m, B, T, k, tok[k], tgt[k]);
    expect_gpipe_split(whole, s0, s1, M, tok[0], tgt[0]);
    kern_stage_free(whole), kern_stage_free(s0), kern_stage_free(s1);
    /* the families with biases and q/k norms */
    const struct model_config *fams[] = {&qwen2_gqa, &qwen3_hd, &olmo2_mha, &llama_window};
    for (int f = 0; f < 4; f++) {
        m = fams[f];
        whole = stage_new(m, 0, 2, B, T, M, 5), s0 = stage_new(m, 0, 1, B, T, M, 5);
        s1 = stage_new(m, 1, 2, B, T, M, 5);
        for (int k = 0; k < M; k++)
            fold_batch(m, B, T, k, tok[k], tgt[k]);
        expect_gpipe_split(whole, s0, s1, M, tok[0], tgt[0]);
        kern_stage_free(whole), kern_stage_free(s0), kern_stage_free(s1);
    }
}

/* A tied model: wte and head start equal, take the same summed gradient
 * and stay equal bit for bit through training; the norm counts the shared
 * matrix once; the loss falls. */
static void test_tied_trains(void **state)
{
    (void)state;
    enum { B = 4, T = 16, STEPS = 40 };
    const struct model_config *m = &mqa_tied;
    struct kern_stage *st = stage_new(m, 0, m->layers, B, T, 1, 3);
    struct kern_err err;
    const struct kern_tensor *wte = find_tensor(st, "wte"), *head = find_tensor(st, "head");
    struct kern_adamw h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                           .grad_scale = 1.0f};
    int32_t tok[B * T], tgt[B * T];
    float first = 0, loss = 0;
    for (int s = 0; s < STEPS; s++) {
        fold_batch(m, B, T, s % 4, tok, tgt);
        assert_int_equal(kern_stage_zero_grad(st, &err), 0);
        loss = step_loss(st, 0, tok, tgt, 1.0f);
        first = s == 0 ? loss : first;
        assert_int_equal(kern_stage_tie_grads(st, &err), 0);
        float *g = read_buf(st, KERN_GRADS);
        assert_memory_equal(g + wte->offset, g + head->offset, wte->count * sizeof *g);
        if (s == 0) {   /* a range of a buffer: the tensor's floats; outside it, refused */
            float *part = malloc(head->count * sizeof *part);
            assert_non_null(part);
            assert_int_equal(kern_stage_range(st, KERN_GRADS, head->offset, head->count, part, 1, &err), 0);
            assert_memory_equal(part, g + head->offset, head->count * sizeof *part);
            assert_int_equal(kern_stage_range(st, KERN_GRADS, head->offset, head->count + 1, part, 1, &err), -1);
            free(part);
        }
        double norm, by_hand = 0;
        assert_int_equal(kern_stage_grad_norm2(st, &norm, &err), 0);
        for (size_t i = 0; i < kern_stage_param_count(st); i++)
            if (i < head->offset || i >= head->offset + head->count)
                by_hand += (double)g[i] * g[i];
        assert_true(fabs(norm - by_hand) <= 1e-12 * by_hand);
        free(g);
        assert_int_equal(kern_stage_adamw(st, &h, &err), 0);
        float *p = read_buf(st, KERN_PARAMS);
        assert_memory_equal(p + wte->offset, p + head->offset, wte->count * sizeof *p);
        free(p);
    }
    print_message("tied: loss %.3f -> %.3f in %d steps\n", first, loss, STEPS);
    assert_true(loss < 0.6f * first);
    kern_stage_free(st);
}

/* Stage files carry the family: a Llama stage saves and loads (its peek
 * gives the whole config back), and a GPT-2 stage of the same sizes
 * refuses its file, as the Llama stage refuses the GPT-2 one. */
static void test_stage_file(void **state)
{
    (void)state;
    struct kern_err err;
    struct kern_stage *a = stage_new(&mqa_tied, 1, 2, 2, 8, 1, 9), *b = stage_new(&mqa_tied, 1, 2, 2, 8, 1, 10);
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(a, f);
    struct model_config got;
    struct kern_stage_spec sp = {.micro_batch = 1, .seq_len = 1, .in_flight = 1};
    assert_int_equal(kern_stage_file_peek(f, &got, &sp, NULL, &err), 0);
    assert_true(model_config_equal(&got, kern_stage_model(a)));
    assert_true(got.arch == MODEL_LLAMA && got.kv_heads == 1 && got.tied == 1 && got.rope_scaling.factor == 8);
    assert_int_equal(kern_stage_load(b, f, &err), 0);
    float *pa = read_buf(a, KERN_PARAMS), *pb = read_buf(b, KERN_PARAMS);
    assert_memory_equal(pa, pb, kern_stage_param_count(a) * sizeof *pa);
    free(pa), free(pb);
    fclose(f);

    struct model_config g2 = {.vocab = 50, .context = 16, .d_model = 32, .heads = 4, .layers = 2};
    struct kern_stage *gpt = stage_new(&g2, 1, 2, 2, 8, 1, 9);
    f = tmpfile();
    assert_non_null(f);
    save_to(a, f);
    assert_int_equal(kern_stage_load(gpt, f, &err), -1);
    assert_non_null(strstr(err.msg, "llama"));
    fclose(f);
    f = tmpfile();
    assert_non_null(f);
    save_to(gpt, f);
    assert_int_equal(kern_stage_load(a, f, &err), -1);
    assert_non_null(strstr(err.msg, "gpt2"));
    fclose(f);
    kern_stage_free(a), kern_stage_free(b), kern_stage_free(gpt);

    /* a Qwen3 stage's file carries head_dim; a Llama of the same sizes
     * (heads of C / NH) and a Qwen2 of the same shapes refuse it */
    struct kern_stage *q3 = stage_new(&qwen3_hd, 0, 1, 2, 8, 1, 9);
    f = tmpfile();
    assert_non_null(f);
    save_to(q3, f);
    assert_int_equal(kern_stage_file_peek(f, &got, &sp, NULL, &err), 0);
    assert_true(model_config_equal(&got, kern_stage_model(q3)));
    assert_true(got.arch == MODEL_QWEN3 && got.head_dim == 12);
    struct model_config l3 = qwen3_hd, q2 = qwen3_hd;
    l3.arch = MODEL_LLAMA, l3.head_dim = 0;
    q2.arch = MODEL_QWEN2;
    struct kern_stage *ll = stage_new(&l3, 0, 1, 2, 8, 1, 9), *qq = stage_new(&q2, 0, 1, 2, 8, 1, 9);
    assert_int_equal(kern_stage_load(ll, f, &err), -1);
    assert_non_null(strstr(err.msg, "hd=12"));
    rewind(f);
    assert_int_equal(kern_stage_load(qq, f, &err), -1);
    assert_non_null(strstr(err.msg, "qwen3"));
    fclose(f);
    kern_stage_free(q3), kern_stage_free(ll), kern_stage_free(qq);
}

/* What cannot work is refused, naming the field. */
static void test_bad_models(void **state)
{
    (void)state;
    static const struct {
        struct model_config m;
        const char *field;
    } bad[] = {
        {{.vocab = 8, .context = 4, .d_model = 32, .heads = 4, .layers = 1, .arch = MODEL_LLAMA, .kv_heads = 3,
          .ffn_dim = 8}, "kv_heads"},
        {{.vocab = 8, .context = 4, .d_model = 12, .heads = 4, .layers = 1, .arch = MODEL_LLAMA, .ffn_dim = 8},
         "heads"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .arch = MODEL_LLAMA}, "ffn_dim"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .arch = MODEL_LLAMA, .ffn_dim = 8,
          .rope_scaling = {.factor = 8, .low_freq_factor = 4, .high_freq_factor = 1, .original_context = 4}},
         "rope_scaling.high_freq_factor"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .kv_heads = 2}, "kv_heads"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .tied = 1}, "tie_embeddings"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .head_dim = 8}, "head_dim"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .arch = MODEL_QWEN3, .ffn_dim = 8,
          .head_dim = 5}, "head_dim"},
        {{.vocab = 8, .context = 4, .d_model = 18, .heads = 4, .layers = 1, .arch = MODEL_QWEN2, .ffn_dim = 8},
         "d_model"},
        {{.vocab = 8, .context = 4, .d_model = 16, .heads = 4, .layers = 1, .arch = MODEL_QWEN2, .ffn_dim = 8,
          .sliding_window = -1}, "sliding_window"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct model_config m = bad[i].m;
        const char *field = NULL;
        char msg[200];
        model_config_normalise(&m);
        assert_int_equal(model_config_check(&m, &field, msg, sizeof msg), -1);
        if (strcmp(field, bad[i].field))
            fail_msg("case %zu: blamed %s (%s), not %s", i, field, msg, bad[i].field);
        struct kern_stage_spec sp = {.layer_end = 1, .first = 1, .last = 1, .micro_batch = 1, .seq_len = 1,
                                     .in_flight = 1};
        struct kern_stage *st;
        struct kern_err err;
        assert_int_equal(kern_stage_new(&cpu, &bad[i].m, &sp, &st, &err), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_frequencies),
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_families_match_reference),
        cmocka_unit_test(test_split_equals_whole),
        cmocka_unit_test(test_tied_trains),
        cmocka_unit_test(test_stage_file),
        cmocka_unit_test(test_bad_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
