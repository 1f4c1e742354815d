/* test_hf_llama.c - Llama weights in and out the Hugging Face way
 * (models/hf_weights.c, llama_config.c): files written here, by the
 * test's own writer, from a formula that gives every tensor of every block
 * its own values, in F32 and BF16, whole and in shards with an index, in
 * any order, with the rotary buffers older files carry, import with each
 * tensor where its name says; export and re-import are byte for byte;
 * config.json files of SmolLM2-135M's and Llama-3.2-1B's shapes read into
 * those models; bad files and configs are refused with the reason.  The
 * families of the llama kind (Qwen2, Qwen3, OLMo-2): export and re-import
 * byte for byte under the names transformers gives their extra tensors,
 * their config.json (Qwen2.5-0.5B's, Qwen3-0.6B's, OLMo-2-0425-1B's) read
 * into those models and written back. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/model_io.h"
#include "bytes_fixture.h"

/* A small Llama: grouped (2 kv heads of 4), an MLP of 40, three blocks. */
static const struct model_config M = {.vocab = 37, .context = 16, .d_model = 16, .heads = 4, .layers = 3,
                                      .arch = MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 40, .norm_eps = 1e-6,
                                      .rope_theta = 500000};

/* The Hugging Face names and shapes, written out here, not taken from the
 * row: what a LlamaForCausalLM state dict holds. */
static const struct {
    const char *name;   /* "%d": the block */
    char rows, cols;    /* 'C' d_model, 'K' kv width, 'F' ffn, 'V' vocab, '1' a vector */
    const char *shoal;  /* shoal's name of the same tensor ("%d": the block) */
} names[] = {
    {"model.embed_tokens.weight", 'V', 'C', "wte"},
    {"model.layers.%d.input_layernorm.weight", '1', 'C', "h%d.ln1w"},
    {"model.layers.%d.self_attn.q_proj.weight", 'C', 'C', "h%d.qw"},
    {"model.layers.%d.self_attn.k_proj.weight", 'K', 'C', "h%d.kw"},
    {"model.layers.%d.self_attn.v_proj.weight", 'K', 'C', "h%d.vw"},
    {"model.layers.%d.self_attn.o_proj.weight", 'C', 'C', "h%d.ow"},
    {"model.layers.%d.post_attention_layernorm.weight", '1', 'C', "h%d.ln2w"},
    {"model.layers.%d.mlp.gate_proj.weight", 'F', 'C', "h%d.gatew"},
    {"model.layers.%d.mlp.up_proj.weight", 'F', 'C', "h%d.upw"},
    {"model.layers.%d.mlp.down_proj.weight", 'C', 'F', "h%d.downw"},
    {"model.norm.weight", '1', 'C', "lnfw"},
    {"lm_head.weight", 'V', 'C', "head"},
};
#define N_NAMES (int)(sizeof names / sizeof names[0])

static size_t extent(const struct model_config *m, char d)
{
    return d == 'C' ? (size_t)m->d_model : d == 'K' ? (size_t)m->kv_heads * (m->d_model / m->heads)
           : d == 'F' ? (size_t)m->ffn_dim : d == 'V' ? (size_t)m->vocab : 1;
}

/* Element i of tensor k of block l: distinct for every tensor, exact in
 * bf16 (8 significant bits). */
static float value(int k, int l, size_t i)
{
    return (float)((int)((k * 131 + l * 17 + (int)(i % 97)) % 101) - 50) / 64.0f;
}


/* A safetensors file of the tensors of `which` (a bit per name index; all
 * blocks), bf16 or f32, in reverse order when asked, with an extra entry
 * (name, a 1-D F32 of `extra_n` values) when extra is not NULL. */
struct opts {
    unsigned which;
    int bf16, reverse;
    const char *extra;
    int extra_n;
    int bad_kv;      /* k_proj one row short */
};

static struct bytes file_of(const struct model_config *m, const struct opts *o)
{
    struct bytes head = {0}, data = {0}, out = {0};
    char buf[512];
    int order[64 * 16], count = 0;
    for (int k = 0; k < N_NAMES; k++)
        for (int l = 0; l < (strstr(names[k].name, "%d") ? m->layers : 1); l++)
            if (o->which & (1u << k))
                order[count++] = k * 64 + l;
    put_bytes(&head, "{\"__metadata__\":{\"format\":\"pt\"}", 31);
    for (int c = 0; c < count; c++) {
        int x = order[o->reverse ? count - 1 - c : c], k = x / 64, l = x % 64;
        size_t rows = extent(m, names[k].rows) - (o->bad_kv && names[k].rows == 'K'), cols = extent(m, names[k].cols);
        size_t begin = data.n;
        for (size_t i = 0; i < rows * cols; i++) {
            float v = value(k, l, i);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);
            o->bf16 ? put_bytes(&data, &h, 2) : put_bytes(&data, &v, 4);
        }
        char name[128];
        snprintf(name, sizeof name, names[k].name, l);
        int w = names[k].rows == '1'
            ? snprintf(buf, sizeof buf, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                       name, o->bf16 ? "BF16" : "F32", cols, begin, data.n)
            : snprintf(buf, sizeof buf, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
                       name, o->bf16 ? "BF16" : "F32", rows, cols, begin, data.n);
        put_bytes(&head, buf, (size_t)w);
    }
    if (o->extra) {
        size_t begin = data.n;
        float z = 0;
        for (int i = 0; i < o->extra_n; i++)
            put_bytes(&data, &z, 4);
        int w = snprintf(buf, sizeof buf, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                         o->extra, o->extra_n, begin, data.n);
        put_bytes(&head, buf, (size_t)w);
    }
    put_bytes(&head, "}", 1);
    while (head.n % 8)
        put_bytes(&head, " ", 1);
    uint64_t len = head.n;
    put_bytes(&out, &len, 8);
    put_bytes(&out, head.p, head.n);
    put_bytes(&out, data.p, data.n);
    free(head.p), free(data.p);
    return out;
}

static FILE *as_file(const struct bytes *b)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
    rewind(f);
    return f;
}

/* kern_hf_read of the given files. */
static int read_files(const struct model_config *m, struct bytes *files, int n, float **params, struct kern_err *err)
{
    FILE *f[4];
    const char *nm[4] = {"a.safetensors", "b.safetensors", "c.safetensors", "d.safetensors"};
    for (int i = 0; i < n; i++)
        f[i] = as_file(&files[i]);
    int rc = kern_hf_read(m, f, nm, n, params, err);
    for (int i = 0; i < n; i++)
        fclose(f[i]);
    return rc;
}

/* Every tensor of the imported model holds the formula's values of the
 * Hugging Face tensor of the same meaning. */
static void expect_formula(const struct model_config *m, const float *p, int tied)
{
    struct kern_stage_spec spec = {.layer_end = m->layers, .first = 1, .last = 1, .micro_batch = 1, .seq_len = 1,
                                   .in_flight = 1};
    struct kern_stage *st;
    struct kern_err err;
    struct kern_device cpu = {KERN_CPU, 0};
    assert_int_equal(kern_stage_new(&cpu, m, &spec, &st, &err), 0);
    int checked = 0;
    for (int k = 0; k < N_NAMES; k++)
        for (int l = 0; l < (strstr(names[k].name, "%d") ? m->layers : 1); l++) {
            char sn[32];
            snprintf(sn, sizeof sn, names[k].shoal, l);
            const struct kern_tensor *t = NULL;
            for (int i = 0; i < kern_stage_tensor_count(st); i++)
                if (strcmp(kern_stage_tensor(st, i)->name, sn) == 0)
                    t = kern_stage_tensor(st, i);
            assert_non_null(t);
            int src = tied && k == N_NAMES - 1 ? 0 : k;   /* a tied head is the embedding */
            for (size_t i = 0; i < t->count; i++)
                if (p[t->offset + i] != value(src, l, i))
                    fail_msg("%s[%zu] is %g, not %s's %g", sn, i, p[t->offset + i], names[k].name,
                             value(src, l, i));
            checked++;
        }
    assert_int_equal(checked, kern_stage_tensor_count(st));
    kern_stage_free(st);
}

#define ALL ((1u << N_NAMES) - 1)
#define NO_HEAD (ALL & ~(1u << (N_NAMES - 1)))

static void test_import(void **state)
{
    (void)state;
    struct kern_err err;
    float *p = NULL;
    /* one file, f32, in order */
    struct bytes b = file_of(&M, &(struct opts){.which = ALL});
    assert_int_equal(read_files(&M, &b, 1, &p, &err), 0);
    expect_formula(&M, p, 0);
    free(p), free(b.p);
    /* bf16, reverse order, with the rotary buffers of older files */
    b = file_of(&M, &(struct opts){.which = ALL, .bf16 = 1, .reverse = 1,
                                   .extra = "model.layers.1.self_attn.rotary_emb.inv_freq", .extra_n = 2});
    assert_int_equal(read_files(&M, &b, 1, &p, &err), 0);
    expect_formula(&M, p, 0);
    free(p), free(b.p);
    /* three shards, given in any order: embeddings and norms, attention,
     * the MLP and head */
    struct bytes sh[3] = {file_of(&M, &(struct opts){.which = 1u | 1u << 1 | 1u << 6 | 1u << 10}),
                          file_of(&M, &(struct opts){.which = 0x3cu, .bf16 = 1}),
                          file_of(&M, &(struct opts){.which = 0xb80u})};
    struct bytes shuffled[3] = {sh[2], sh[0], sh[1]};
    assert_int_equal(read_files(&M, shuffled, 3, &p, &err), 0);
    expect_formula(&M, p, 0);
    free(p);
    for (int i = 0; i < 3; i++)
        free(sh[i].p);
    /* tied: no lm_head.weight, the head is the embedding */
    struct model_config tied = M;
    tied.tied = 1;
    b = file_of(&tied, &(struct opts){.which = NO_HEAD});
    assert_int_equal(read_files(&tied, &b, 1, &p, &err), 0);
    expect_formula(&tied, p, 1);
    free(p), free(b.p);
}

static void expect_refused(const struct model_config *m, struct bytes *files, int n, const char *want,
                           const char *why)
{
    struct kern_err err = {{0}};
    float *p = (float *)&err;   /* left alone on failure */
    if (read_files(m, files, n, &p, &err) != -1 || !strstr(err.msg, want))
        fail_msg("%s: said '%s', want '%s'", why, err.msg, want);
    assert_true(p == (float *)&err);
    for (int i = 0; i < n; i++)
        free(files[i].p);
}

static void test_bad_files(void **state)
{
    (void)state;
    struct bytes b[2];
    b[0] = file_of(&M, &(struct opts){.which = NO_HEAD});
    expect_refused(&M, b, 1, "lm_head.weight is missing", "an untied model without its head");
    b[0] = file_of(&M, &(struct opts){.which = ALL & ~(1u << 4)});
    expect_refused(&M, b, 1, "model.layers.0.self_attn.v_proj.weight is missing", "no v_proj");
    b[0] = file_of(&M, &(struct opts){.which = ALL, .bad_kv = 1});
    expect_refused(&M, b, 1, "has shape [7,16]; the model", "k_proj of another kv width");
    b[0] = file_of(&M, &(struct opts){.which = ALL, .extra = "model.layers.0.self_attn.q_proj.bias", .extra_n = 16});
    expect_refused(&M, b, 1, "is not part of this model", "a bias (Qwen2's)");
    b[0] = file_of(&M, &(struct opts){.which = ALL, .extra = "model.layers.3.input_layernorm.weight", .extra_n = 16});
    expect_refused(&M, b, 1, "is not part of this model", "a block past the model's");
    b[0] = file_of(&M, &(struct opts){.which = ALL});
    b[1] = file_of(&M, &(struct opts){.which = 1u << 2});
    expect_refused(&M, b, 2, "appears twice", "q_proj in two shards");
    struct model_config tied = M;
    tied.tied = 1;
    b[0] = file_of(&tied, &(struct opts){.which = ALL});   /* lm_head's formula differs from the embedding's */
    expect_refused(&tied, b, 1, "differs from the embedding", "a tied model whose file has another head");
    b[0] = file_of(&M, &(struct opts){.which = ALL});
    b[0].n -= 2;   /* truncated */
    expect_refused(&M, b, 1, "safetensors", "a truncated file");
}

/* m's config.json, written and read back: m (normalised). */
static void expect_config_round_trip(const struct model_config *m)
{
    struct kern_err err;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(kern_llama_config_write(f, m, &err), 0);
    fclose(f);
    struct model_config c, want = *m;
    if (kern_llama_config_read(text, len, &c, &err))
        fail_msg("config.json back: %s\n%s", err.msg, text);
    model_config_normalise(&want);
    assert_true(model_config_equal(&c, &want));
    free(text);
}

/* Export and re-import: bit for bit; config.json and back. */
static void test_export_round_trip(void **state)
{
    (void)state;
    struct kern_err err;
    for (int tie = 0; tie < 2; tie++) {
        struct model_config m = M;
        m.tied = tie;
        m.rope_scaling = (struct model_rope_scaling){.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                                                     .original_context = 8};
        float *p = NULL, *q = NULL;
        struct bytes b = file_of(&m, &(struct opts){.which = tie ? NO_HEAD : ALL});
        assert_int_equal(read_files(&m, &b, 1, &p, &err), 0);
        free(b.p);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_int_equal(kern_hf_write(f, &m, p, &err), 0);
        fclose(f);
        struct bytes out = {(unsigned char *)text, len, len};
        assert_int_equal(read_files(&m, &out, 1, &q, &err), 0);
        assert_memory_equal(p, q, kern_model_param_count(&m) * sizeof *p);
        assert_true((strstr(text + 8, "lm_head.weight") == NULL) == tie);
        /* written again from the re-import: the same bytes */
        char *again = NULL;
        size_t again_len = 0;
        f = open_memstream(&again, &again_len);
        assert_int_equal(kern_hf_write(f, &m, q, &err), 0);
        fclose(f);
        assert_int_equal(again_len, len);
        assert_memory_equal(again, text, len);
        free(again), free(text);
        expect_config_round_trip(&m);
        free(p), free(q);
    }
}

/* The config.json files of the two shapes the issue names, as the hub
 * holds them (abridged to the members that matter, plus a few others). */
static const char smollm2_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":0,\"eos_token_id\":0,\"hidden_act\":\"silu\",\"hidden_size\":576,\"initializer_range\":0.041666666666666664,"
    "\"intermediate_size\":1536,\"is_llama_config\":true,\"max_position_embeddings\":8192,\"model_type\":\"llama\","
    "\"num_attention_heads\":9,\"num_hidden_layers\":30,\"num_key_value_heads\":3,\"pretraining_tp\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_interleaved\":false,\"rope_scaling\":null,\"rope_theta\":100000,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.40.1\","
    "\"use_cache\":true,\"vocab_size\":49152}";
static const char llama32_1b_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":128001,\"head_dim\":64,\"hidden_act\":\"silu\",\"hidden_size\":2048,"
    "\"initializer_range\":0.02,\"intermediate_size\":8192,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":16,\"num_key_value_heads\":8,"
    "\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,"
    "\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
    "\"rope_theta\":500000.0,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.45.0.dev0\",\"use_cache\":true,\"vocab_size\":128256}";

static void test_configs(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config m;
    assert_int_equal(kern_llama_config_read(smollm2_config, strlen(smollm2_config), &m, &err), 0);
    assert_true(m.arch == MODEL_LLAMA && m.vocab == 49152 && m.d_model == 576 && m.ffn_dim == 1536 &&
                m.layers == 30 && m.heads == 9 && m.kv_heads == 3 && m.tied == 1 && m.rope_theta == 100000 &&
                m.norm_eps == 1e-5 && m.rope_scaling.factor == 0 && m.context == 8192);
    print_message("SmolLM2-135M: %zu parameters\n", kern_model_param_count(&m));
    assert_int_equal(kern_llama_config_read(llama32_1b_config, strlen(llama32_1b_config), &m, &err), 0);
    assert_true(m.vocab == 128256 && m.d_model == 2048 && m.ffn_dim == 8192 && m.layers == 16 && m.heads == 32 &&
                m.kv_heads == 8 && m.tied == 1 && m.rope_theta == 500000 && m.rope_scaling.factor == 32 &&
                m.rope_scaling.low_freq_factor == 1 && m.rope_scaling.high_freq_factor == 4 &&
                m.rope_scaling.original_context == 8192 && m.context == 131072);
    print_message("Llama-3.2-1B: %zu parameters\n", kern_model_param_count(&m));

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"model_type\":\"gpt2\"}", "model_type is 'gpt2'"},
        {"{\"model_type\":\"llama\",\"hidden_act\":\"gelu\"}", "hidden_act is 'gelu'"},
        {"{\"model_type\":\"llama\",\"attention_bias\":true}", "no biases"},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}", "type 'yarn'"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"max_position_embeddings\":8,\"hidden_size\":16,"
         "\"intermediate_size\":8,\"num_attention_heads\":4,\"num_hidden_layers\":1,\"head_dim\":7}",
         "head size (7)"},
        {"{\"model_type\":\"mistral\"}", "model_type is 'mistral'"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"max_position_embeddings\":8,\"intermediate_size\":8,"
         "\"num_attention_heads\":4,\"num_hidden_layers\":1}", "hidden_size is missing"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"max_position_embeddings\":8,\"hidden_size\":16,"
         "\"intermediate_size\":8,\"num_attention_heads\":4,\"num_key_value_heads\":3,\"num_hidden_layers\":1}",
         "kv_heads"},
        {"{\"vocab_size\":8}", "model_type is missing"},
        {"[1]", "config.json"},
        {"{\"model_type\":\"llama\",\"model_type\":\"llama\"}", "duplicate object key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct model_config keep = {.vocab = 99};
        m = keep;
        if (kern_llama_config_read(bad[i].text, strlen(bad[i].text), &m, &err) != -1 || !strstr(err.msg, bad[i].want))
            fail_msg("config %zu: said '%s', want '%s'", i, err.msg, bad[i].want);
        assert_int_equal(m.vocab, 99);
    }
}

/* Qwen2, Qwen3 (heads of 8 where C / NH is 4) and OLMo-2 of M's sizes:
 * exported under their Hugging Face names (the ones Llama lacks, and not
 * the ones they lack), re-imported bit for bit, config.json and back. */
static void test_families_round_trip(void **state)
{
    (void)state;
    static const struct {
        enum model_arch arch;
        int head_dim;
        const char *has, *lacks;
    } fams[] = {
        {MODEL_QWEN2, 0, "\"model.layers.2.self_attn.v_proj.bias\":{\"dtype\":\"F32\",\"shape\":[8]", "o_proj.bias"},
        {MODEL_QWEN3, 8, "\"model.layers.0.self_attn.q_norm.weight\":{\"dtype\":\"F32\",\"shape\":[8]",
         "q_proj.bias"},
        {MODEL_OLMO2, 0, "\"model.layers.1.post_feedforward_layernorm.weight\"", "input_layernorm"},
    };
    struct kern_err err;
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        struct model_config m = M;
        m.arch = fams[k].arch, m.head_dim = fams[k].head_dim;
        model_config_normalise(&m);
        size_t n = kern_model_param_count(&m);
        float *p = malloc(n * sizeof *p), *q = NULL;
        assert_non_null(p);
        for (size_t i = 0; i < n; i++)
            p[i] = value((int)(i % 13), (int)(i % 7), i);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_int_equal(kern_hf_write(f, &m, p, &err), 0);
        fclose(f);
        uint64_t header;
        memcpy(&header, text, 8);
        char *json = strndup(text + 8, (size_t)header);
        assert_non_null(json);
        if (!strstr(json, fams[k].has) || strstr(json, fams[k].lacks))
            fail_msg("%s: want %s and no %s in %s", model_families[m.arch].name, fams[k].has, fams[k].lacks, json);
        free(json);
        struct bytes out = {(unsigned char *)text, len, len};
        assert_int_equal(read_files(&m, &out, 1, &q, &err), 0);
        assert_memory_equal(p, q, n * sizeof *p);
        free(text), free(p), free(q);
        expect_config_round_trip(&m);
    }
}

/* As the hub holds them (abridged). */
static const char qwen25_05b_config[] =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":24,\"model_type\":\"qwen2\","
    "\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";
static const char qwen3_06b_config[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"initializer_range\":0.02,\"intermediate_size\":3072,\"max_position_embeddings\":40960,"
    "\"max_window_layers\":28,\"model_type\":\"qwen3\",\"num_attention_heads\":16,\"num_hidden_layers\":28,"
    "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000,"
    "\"sliding_window\":null,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";
static const char olmo2_1b_config[] =
    "{\"architectures\":[\"Olmo2ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"eos_token_id\":100257,\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,"
    "\"intermediate_size\":8192,\"max_position_embeddings\":4096,\"model_type\":\"olmo2\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":16,\"num_key_value_heads\":16,\"pad_token_id\":100277,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":500000,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"float32\",\"use_cache\":true,\"vocab_size\":100352}";

/* Parameters of a model as transformers counts them (a tied matrix once). */
static uint64_t hf_params(const struct model_config *m)
{
    return model_stage_params(m, 0, m->layers, 1, 1) - model_tied_params(m);
}

static void test_family_configs(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config m;
    assert_int_equal(kern_llama_config_read(qwen25_05b_config, strlen(qwen25_05b_config), &m, &err), 0);
    assert_true(m.arch == MODEL_QWEN2 && m.d_model == 896 && m.heads == 14 && m.kv_heads == 2 && m.head_dim == 64 &&
                m.ffn_dim == 4864 && m.layers == 24 && m.tied == 1 && m.rope_theta == 1e6 &&
                m.sliding_window == 0);
    assert_int_equal(hf_params(&m), 494032768);   /* Qwen2.5-0.5B's model card: 0.49B */
    assert_int_equal(kern_llama_config_read(qwen3_06b_config, strlen(qwen3_06b_config), &m, &err), 0);
    assert_true(m.arch == MODEL_QWEN3 && m.d_model == 1024 && m.heads == 16 && m.kv_heads == 8 &&
                m.head_dim == 128 && model_q_width(&m) == 2048 && m.layers == 28 && m.tied == 1);
    assert_int_equal(hf_params(&m), 596049920);   /* the hub's count for Qwen3-0.6B */
    assert_int_equal(kern_llama_config_read(olmo2_1b_config, strlen(olmo2_1b_config), &m, &err), 0);
    assert_true(m.arch == MODEL_OLMO2 && m.d_model == 2048 && m.heads == 16 && m.kv_heads == 16 &&
                m.ffn_dim == 8192 && m.layers == 16 && m.tied == 0 && m.vocab == 100352 && m.rope_theta == 5e5);
    print_message("OLMo-2-0425-1B: %llu parameters\n", (unsigned long long)hf_params(&m));

    /* Qwen's window: every layer (max_window_layers 0), none (all below it), or refused */
    static const char window_all[] =
        "{\"model_type\":\"qwen2\",\"vocab_size\":8,\"max_position_embeddings\":8,\"hidden_size\":16,"
        "\"intermediate_size\":8,\"num_attention_heads\":4,\"num_hidden_layers\":3,\"use_sliding_window\":true,"
        "\"sliding_window\":4,\"max_window_layers\":0}";
    assert_int_equal(kern_llama_config_read(window_all, strlen(window_all), &m, &err), 0);
    assert_int_equal(m.sliding_window, 4);
    char text[sizeof window_all + 8];
    snprintf(text, sizeof text, "%.*s3}", (int)(strlen(window_all) - 2), window_all);
    assert_int_equal(kern_llama_config_read(text, strlen(text), &m, &err), 0);
    assert_int_equal(m.sliding_window, 0);
    snprintf(text, sizeof text, "%.*s1}", (int)(strlen(window_all) - 2), window_all);
    assert_int_equal(kern_llama_config_read(text, strlen(text), &m, &err), -1);
    assert_non_null(strstr(err.msg, "every layer or none"));
    /* a window is not exported */
    m.sliding_window = 4;
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(kern_llama_config_write(f, &m, &err), -1);
    assert_non_null(strstr(err.msg, "sliding window"));
    fclose(f);
}

static void test_index(void **state)
{
    (void)state;
    struct kern_err err;
    struct kern_hf_index *ix = malloc(sizeof *ix);
    assert_non_null(ix);
    static const char index[] =
        "{\"metadata\":{\"total_size\":123},\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
        "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}";
    assert_int_equal(kern_hf_index_read(index, strlen(index), ix, &err), 0);
    assert_int_equal(ix->n_files, 2);
    assert_int_equal(ix->n_names, 3);
    assert_string_equal(ix->files[0], "model-00002-of-00002.safetensors");
    assert_string_equal(ix->files[1], "model-00001-of-00002.safetensors");
    static const char *const bad[] = {
        "{\"weight_map\":{\"a\":\"../etc/passwd\"}}", "{\"weight_map\":{}}", "{\"metadata\":{}}",
        "{\"weight_map\":{\"a\":1}}", "{\"weight_map\":{\"a\":\"x\"},\"weight_map\":{}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (kern_hf_index_read(bad[i], strlen(bad[i]), ix, &err) != -1)
            fail_msg("index %zu accepted", i);
    free(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_families_round_trip),
        cmocka_unit_test(test_family_configs),
        cmocka_unit_test(test_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
