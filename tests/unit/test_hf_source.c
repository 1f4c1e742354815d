/* test_hf_source.c - models/hf_source.h and what carries it: the source
 * kept by an import (packed, read back, refused when bad), config.json
 * merged with it (every member kept but what the model changed),
 * generation_config.json derived as transformers derives it, stage files
 * of version 4 carrying the source through save, load, assemble and a
 * damaged section refused, and BF16's rounding (models/safetensors.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../models/checkpoint.h"
#include "../../models/hf_source.h"
#include "../../models/safetensors.h"
#include "kernels_fixture.h"

static const struct model_config gpt2 = {.vocab = 16, .context = 8, .d_model = 8, .heads = 2, .layers = 2};

/* f's whole text, malloc'd */
static char *text_of(FILE *f)
{
    long n = ftell(f);
    char *t = calloc((size_t)n + 1, 1);
    rewind(f);
    assert_int_equal(fread(t, 1, (size_t)n, f), (size_t)n);
    return t;
}

/* kern_hf_config_merge's text (src may be NULL), which must succeed */
static char *merged(const char *src, const struct model_config *m, const float *params, const char *dtype)
{
    struct kern_err err;
    FILE *f = tmpfile();
    if (kern_hf_config_merge(f, src, src ? strlen(src) : 0, m, params, dtype, &err) != 0)
        fail_msg("merge: %s", err.msg);
    char *t = text_of(f);
    fclose(f);
    return t;
}

/* kern_hf_generation_config_write's text of config text t */
static char *generation(const char *t, const struct model_config *m)
{
    struct kern_err err;
    FILE *f = tmpfile();
    if (kern_hf_generation_config_write(f, t, strlen(t), m, &err) != 0)
        fail_msg("generation: %s", err.msg);
    char *g = text_of(f);
    fclose(f);
    return g;
}

static void test_pack_get(void **state)
{
    (void)state;
    struct kern_err err;
    const char *names[] = {"config.json", "tokenizer.json"}, *texts[] = {"{\"a\":1}", "{\"model\":{\"x\":\"\\u00e9\"}}"};
    size_t lens[] = {7, strlen(texts[1])}, len, got_len;
    char *src, *got;
    assert_int_equal(kern_hf_source_pack(names, texts, lens, 2, &src, &len, &err), 0);
    assert_int_equal(kern_hf_source_get(src, len, "tokenizer.json", &got, &got_len, &err), 0);
    assert_int_equal(got_len, lens[1]);
    assert_memory_equal(got, texts[1], lens[1]);   /* verbatim */
    free(got);
    assert_int_equal(kern_hf_source_get(src, len, "special_tokens_map.json", &got, &got_len, &err), 0);
    assert_null(got);
    free(src);

    static const struct { const char *name, *text, *msg; } bad[] = {
        {"tokenizer.json", "not json", "tokenizer.json: '[' or '{' expected"},
        {"tokenizer.json", "[1]", "not a JSON object"},
        {"vocab.txt", "{}", "vocab.txt is not a file an import keeps"},
        {"config.json", "{}", "config.json is given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *n2[] = {"config.json", bad[i].name}, *t2[] = {"{}", bad[i].text};
        size_t l2[] = {2, strlen(bad[i].text)};
        src = (char *)&err;
        if (kern_hf_source_pack(n2, t2, l2, 2, &src, &len, &err) != -1 || !strstr(err.msg, bad[i].msg))
            fail_msg("bad %zu: said '%s', want '%s'", i, err.msg, bad[i].msg);
        assert_null(src);
    }
}

static void test_config_merge(void **state)
{
    (void)state;
    struct kern_err err;
    size_t n = kern_model_param_count(&gpt2);
    float *whole = calloc(n, sizeof *whole);
    whole[0] = 1;   /* wte differs from head: untied */
    const char *src = "{\"model_type\":\"gpt2\",\"n_positions\":1024,\"n_ctx\":1024,\"n_embd\":8,\"n_head\":2,"
                      "\"n_layer\":2,\"vocab_size\":16,\"bos_token_id\":7,\"eos_token_id\":9,\"pad_token_id\":null,"
                      "\"layer_norm_epsilon\":1e-05,\"task_specific_params\":{\"x\":[1,2]},\"torch_dtype\":\"float32\","
                      "\"transformers_version\":\"4.0\"}";
    char *t = merged(src, &gpt2, whole, "bfloat16");
    /* kept as they were */
    assert_non_null(strstr(t, "\"bos_token_id\": 7"));
    assert_non_null(strstr(t, "\"pad_token_id\": null"));
    assert_non_null(strstr(t, "\"x\": [\n"));
    assert_non_null(strstr(t, "\"transformers_version\": \"4.0\""));
    /* what the model changed: the context, the head, the dtype */
    assert_non_null(strstr(t, "\"n_positions\": 8"));
    assert_non_null(strstr(t, "\"n_ctx\": 8"));
    assert_non_null(strstr(t, "\"tie_word_embeddings\": false"));
    assert_non_null(strstr(t, "\"torch_dtype\": \"bfloat16\""));
    /* sorted, as save_pretrained writes */
    assert_true(strstr(t, "\"bos_token_id\"") < strstr(t, "\"eos_token_id\""));

    char *g = generation(t, &gpt2);
    assert_string_equal(g, "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": 7,\n  \"eos_token_id\": 9,\n"
                           "  \"transformers_version\": \"4.0\"\n}\n");
    free(g);
    free(t);

    /* no source: the family's config, and transformers' default ids */
    struct model_config llama = {.arch = MODEL_LLAMA, .vocab = 16, .context = 8, .d_model = 8, .heads = 2,
                                 .kv_heads = 1, .ffn_dim = 12, .layers = 1, .norm_eps = 1e-5,
                                 .rope_theta = 10000, .tied = 1};
    model_config_normalise(&llama);
    t = merged(NULL, &llama, NULL, "float32");
    assert_non_null(strstr(t, "\"tie_word_embeddings\": true"));
    g = generation(t, &llama);
    assert_non_null(strstr(g, "\"bos_token_id\": 1,\n  \"eos_token_id\": 2\n"));
    free(g);
    free(t);

    /* members the source leaves out stay out when the model says
     * transformers' default; max_position_embeddings is the source's */
    const char *lsrc = "{\"model_type\":\"llama\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":12,"
                       "\"num_attention_heads\":2,\"num_hidden_layers\":1,\"max_position_embeddings\":4096}";
    struct model_config plain = llama;
    plain.kv_heads = 2, plain.norm_eps = 1e-6, plain.tied = 0;
    t = merged(lsrc, &plain, NULL, "float32");
    assert_null(strstr(t, "num_key_value_heads"));
    assert_null(strstr(t, "rms_norm_eps"));
    assert_null(strstr(t, "rope_theta"));
    assert_null(strstr(t, "tie_word_embeddings"));
    assert_non_null(strstr(t, "\"max_position_embeddings\": 4096"));
    free(t);

    /* a source that is not JSON: refused, nothing written */
    FILE *f = tmpfile();
    assert_int_equal(kern_hf_config_merge(f, "{", 1, &gpt2, whole, "float32", &err), -1);
    assert_non_null(strstr(err.msg, "the imported config.json"));
    assert_int_equal(ftell(f), 0);
    fclose(f);
    free(whole);
}

/* A stage file with a source: saved as version 4, loaded back with it,
 * read by kern_stage_file_source and kern_stage_file_params, carried by
 * assemble and by the next save; a damaged section fails the checksum. */
static void test_stage_source(void **state)
{
    (void)state;
    struct kern_err err;
    struct kern_stage *a = stage_new(&gpt2, 0, 2, 1, 4, 1, 1), *b = stage_new(&gpt2, 0, 2, 1, 4, 1, 2);
    const char src[] = "{\"config.json\":\"{}\"}";
    size_t len;
    assert_int_equal(kern_stage_set_source(a, src, sizeof src - 1, &err), 0);
    FILE *f = tmpfile();
    assert_int_equal(kern_stage_save(a, f, &err), 0);
    long size = ftell(f);
    rewind(f);
    unsigned char head[12];
    assert_int_equal(fread(head, 1, 12, f), 12);
    assert_int_equal(head[8], 4);   /* version 4 */
    rewind(f);
    assert_int_equal(kern_stage_load(b, f, &err), 0);
    const char *got = kern_stage_source(b, &len);
    assert_int_equal(len, sizeof src - 1);
    assert_memory_equal(got, src, len);
    char *text;
    assert_int_equal(kern_stage_file_source(f, &text, &len, &err), 0);
    assert_string_equal(text, src);
    free(text);
    struct model_config m;
    struct kern_stage_spec sp;
    float *params;
    uint64_t n;
    rewind(f);
    assert_int_equal(kern_stage_file_params(f, &m, &sp, &params, &n, &err), 0);
    free(params);

    /* assemble takes it from a source stage */
    struct kern_stage *c = stage_new(&gpt2, 0, 2, 1, 4, 1, 3);
    assert_int_equal(kern_stage_assemble(c, &b, 1, &err), 0);
    got = kern_stage_source(c, &len);
    assert_int_equal(len, sizeof src - 1);

    /* a byte of the section changed: the checksum says so, b unchanged */
    fseek(f, size - 8 - 2, SEEK_SET);
    fputc('X', f);
    rewind(f);
    assert_int_equal(kern_stage_load(c, f, &err), -1);
    assert_non_null(strstr(err.msg, "checksum"));
    got = kern_stage_source(c, &len);
    assert_memory_equal(got, src, len);
    /* cut inside the section: refused by the size check */
    assert_int_equal(ftruncate(fileno(f), size - 9), 0);
    rewind(f);
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, NULL, &err), -1);
    fclose(f);

    /* a stage without a source saves version 4 with a section of 0 bytes */
    assert_int_equal(kern_stage_set_source(c, NULL, 0, &err), 0);
    f = tmpfile();
    assert_int_equal(kern_stage_save(c, f, &err), 0);
    rewind(f);
    assert_int_equal(fread(head, 1, 12, f), 12);
    assert_int_equal(head[8], 4);
    fclose(f);
    kern_stage_free(a);
    kern_stage_free(b);
    kern_stage_free(c);
}

static uint16_t bits16(float x) { return st_bf16(x); }
static float from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(bits16(1.0f), 0x3f80);
    assert_int_equal(bits16(from_bits(0x3f808000)), 0x3f80);   /* a tie, to the even one below */
    assert_int_equal(bits16(from_bits(0x3f818000)), 0x3f82);   /* a tie, to the even one above */
    assert_int_equal(bits16(from_bits(0x3f808001)), 0x3f81);   /* past the tie: up */
    assert_int_equal(bits16(from_bits(0x3f807fff)), 0x3f80);
    assert_int_equal(bits16(from_bits(0xbf818000)), 0xbf82);   /* sign apart */
    assert_int_equal(bits16(INFINITY), 0x7f80);
    assert_int_equal(bits16(from_bits(0x7f7fffff)), 0x7f80);   /* FLT_MAX rounds to infinity, as torch does */
    uint16_t nan = bits16(NAN);
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_get),
        cmocka_unit_test(test_config_merge),
        cmocka_unit_test(test_stage_source),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
