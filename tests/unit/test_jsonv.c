/* test_jsonv.c - common/jsonv.h: parsing request bodies and validating them
 * against a field table. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/jsonv.h"

/* ---- jv_parse_object ---- */

static void expect_parse_fails(const char *what, const char *data, size_t len)
{
    struct shoal_err err;
    err_clear(&err);
    json_t *j = jv_parse_object(data, len, &err);
    if (j) {
        json_decref(j);
        fail_msg("%s: parsed, want invalid_json", what);
    }
    if (err.status != 400 || strcmp(err.code, "invalid_json") != 0)
        fail_msg("%s: err %d %s, want 400 invalid_json", what, err.status, err.code);
    assert_true(err.message[0] != '\0');
}

static void test_parse_rejects_bad_bodies(void **state)
{
    (void)state;
    static const struct {
        const char *what, *body;
    } cases[] = {
        { "whitespace only", "  \n" },
        { "truncated", "{\"a\":" },
        { "trailing comma", "{\"a\":1,}" },
        { "single quotes", "{'a':1}" },
        { "trailing garbage", "{} x" },
        { "two objects", "{}{}" },
        { "array", "[1,2]" },
        { "number", "42" },
        { "string", "\"s\"" },
        { "null", "null" },
        { "true", "true" },
        { "duplicate key", "{\"a\":1,\"a\":2}" },
        { "duplicate key, nested", "{\"o\":{\"b\":1,\"b\":1}}" },
        { "integer too big for int64", "{\"a\":99999999999999999999}" },
        { "invalid UTF-8", "{\"a\":\"\xff\"}" },
        { "NUL escape inside a string", "{\"a\":\"x\\u0000y\"}" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_parse_fails(cases[i].what, cases[i].body, strlen(cases[i].body));
    expect_parse_fails("empty", "", 0);
    expect_parse_fails("NULL with length 0", NULL, 0);
}

static void test_parse_error_names_line_and_column(void **state)
{
    (void)state;
    struct shoal_err err;
    const char *body = "{\n  \"a\": 1,\n  \"b\": }";
    err_clear(&err);
    assert_null(jv_parse_object(body, strlen(body), &err));
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "invalid_json");
    assert_string_equal(err.field, "");
    assert_non_null(strstr(err.message, "line 3"));
    assert_non_null(strstr(err.message, "column"));
}

static void test_parse_accepts_objects_and_respects_len(void **state)
{
    (void)state;
    struct shoal_err err;
    err_clear(&err);
    json_t *j = jv_parse_object("{}", 2, &err);
    assert_non_null(j);
    assert_true(json_is_object(j));
    assert_int_equal(json_object_size(j), 0);
    json_decref(j);

    /* Only `len` bytes are read: the garbage after them is not seen. */
    const char *body = "{\"a\":[1,{\"b\":null}]}garbage";
    j = jv_parse_object(body, strlen(body) - 7, &err);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "a")), 2);
    json_decref(j);
    assert_int_equal(err.status, 0);
}

/* Builds {"a": followed by `depth` nested arrays or objects around a 1. */
static char *nested(size_t depth, int objects, size_t *len)
{
    const char *open = objects ? "{\"a\":" : "[";
    size_t olen = strlen(open);
    char *s = malloc(5 + depth * (olen + 1) + 2);
    assert_non_null(s);
    size_t n = 0;
    memcpy(s + n, "{\"a\":", 5);   /* the top level must be an object */
    n += 5;
    for (size_t i = 0; i < depth; i++) {
        memcpy(s + n, open, olen);
        n += olen;
    }
    s[n++] = '1';
    for (size_t i = 0; i < depth; i++)
        s[n++] = objects ? '}' : ']';
    s[n++] = '}';
    *len = n;
    return s;
}

static void test_parse_deep_nesting_does_not_crash(void **state)
{
    (void)state;
    /* Shallow enough: accepted. */
    for (int objects = 0; objects <= 1; objects++) {
        size_t len;
        char *s = nested(100, objects, &len);
        struct shoal_err err;
        err_clear(&err);
        json_t *j = jv_parse_object(s, len, &err);
        assert_non_null(j);
        json_decref(j);
        free(s);
    }
    /* Far past any sane depth: refused cleanly, no stack overflow. */
    static const size_t depths[] = { 5000, 200000 };
    for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
        for (int objects = 0; objects <= 1; objects++) {
            size_t len;
            char *s = nested(depths[d], objects, &len);
            expect_parse_fails(objects ? "deep objects" : "deep arrays", s, len);
            free(s);
        }
    }
    /* Unbalanced: only openers. */
    size_t n = 100000;
    char *s = malloc(n + 6);
    assert_non_null(s);
    memcpy(s, "{\"a\":", 5);
    memset(s + 5, '[', n);
    expect_parse_fails("unterminated deep arrays", s, n + 5);
    free(s);
}

/* An error goes back to the client as JSON, so its message and field must
 * stay UTF-8: jansson quotes the bytes near a syntax error cut anywhere
 * (found by tests/fuzz/fuzz_bodies: the server answered 400 with an empty
 * body), and a client's unknown member may be long and multi-byte. */
static void test_errors_stay_utf8(void **state)
{
    (void)state;
    struct shoal_err err;
    /* "\u0" then U+041C (two bytes): jansson's reason cuts after its first byte. */
    const char *body = "{\"\\u0\xd0\x9c" "9report\\id\":\"\"}";
    err_clear(&err);
    assert_null(jv_parse_object(body, strlen(body), &err));
    json_t *j = json_string(err.message);
    if (!j)
        fail_msg("the message is not UTF-8: %s", err.message);
    json_decref(j);
    assert_non_null(strstr(err.message, "\\xd0"));

    /* 200 two-byte characters in an unknown member's name. */
    char key[402], doc[440];
    for (int i = 0; i < 200; i++)
        memcpy(key + 2 * i, "\xc3\xa9", 2);
    key[400] = '\0';
    snprintf(doc, sizeof doc, "{\"%s\":1}", key);
    json_t *obj = jv_parse_object(doc, strlen(doc), &err);
    assert_non_null(obj);
    struct { int64_t n; } out;
    static const struct jv_field fields[] = {
        { "n", JV_INT, 0, 0, 0, 1, 0, 0, NULL, NULL },
        { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
    };
    assert_int_equal(jv_object(obj, fields, "", &out, &err), -1);
    assert_string_equal(err.code, "unknown_field");
    assert_true(strlen(err.field) <= 100);
    assert_non_null(strstr(err.field, "..."));
    json_t *f = json_string(err.field), *m = json_string(err.message);
    if (!f || !m)
        fail_msg("field or message is not UTF-8: %s / %s", err.field, err.message);
    json_decref(f);
    json_decref(m);
    json_decref(obj);
}

/* ---- jv_object ---- */

struct thing {
    int64_t n;
    double x;
    char s[8];
    int b;
    char color[8];
    int64_t opt;
    char tag[4];        /* size smaller than the table's max */
    int64_t d_model;
    int64_t k;
    int64_t big;
};

static const char *const colors[] = { "red", "green", NULL };

#define F(f) offsetof(struct thing, f)
#define SZ(f) sizeof(((struct thing *)0)->f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field inner_fields[] = {
    { "k", JV_INT, 1, 0, 0, 10, F(k), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field model_fields[] = {
    { "d_model", JV_INT, 1, 0, 1, 1024, F(d_model), 0, NULL, NULL },
    { "inner", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, inner_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field thing_fields[] = {
    { "n", JV_INT, 1, 0, 1, 100, F(n), 0, NULL, NULL },
    { "x", JV_NUM, 0, 0, 0, 1, F(x), 0, NULL, NULL },
    { "s", JV_STR, 0, 0, 1, 5, F(s), SZ(s), NULL, NULL },
    { "b", JV_BOOL, 0, 0, 0, 0, F(b), 0, NULL, NULL },
    { "color", JV_STR, 0, 0, 1, 7, F(color), SZ(color), colors, NULL },
    { "opt", JV_INT, 0, 1, -5, 5, F(opt), 0, NULL, NULL },
    { "tag", JV_STR, 0, 0, 0, 100, F(tag), SZ(tag), NULL, NULL },
    { "model", JV_OBJ, 0, 0, 0, 0, 0, 0, NULL, model_fields },
    { "big", JV_INT, 0, 0, 0, 9007199254740991.0, F(big), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef F
#undef SZ

/* Defaults a caller would set before validating. */
static void thing_defaults(struct thing *t)
{
    memset(t, 0, sizeof *t);
    t->n = -1;
    t->x = 0.25;
    snprintf(t->s, sizeof t->s, "dflt");
    t->b = 1;
    snprintf(t->color, sizeof t->color, "red");
    t->opt = 3;
    snprintf(t->tag, sizeof t->tag, "t");
    t->d_model = 64;
    t->k = 9;
    t->big = 7;
}

static int validate(const char *body, struct thing *t, struct shoal_err *err)
{
    json_error_t je;
    /* JSON_ALLOW_NUL so jv_object's own NUL check is reached (jv_parse_object
     * already refuses "\u0000" at parse time). */
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!j)
        fail_msg("test body does not parse: %s: %s", body, je.text);
    thing_defaults(t);
    err_clear(err);
    int rc = jv_object(j, thing_fields, "", t, err);
    json_decref(j);
    return rc;
}

struct bad_case {
    const char *body;
    int status;
    const char *code;
    const char *field;
    const char *message;   /* exact, or NULL to skip */
};

static void run_bad_cases(const struct bad_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct thing t;
        struct shoal_err err;
        int rc = validate(cases[i].body, &t, &err);
        if (rc != -1)
            fail_msg("%s: accepted, want %d %s on \"%s\"", cases[i].body, cases[i].status,
                     cases[i].code, cases[i].field);
        if (err.status != cases[i].status || strcmp(err.code, cases[i].code) != 0 ||
            strcmp(err.field, cases[i].field) != 0)
            fail_msg("%s: got %d %s on \"%s\" (%s), want %d %s on \"%s\"", cases[i].body,
                     err.status, err.code, err.field, err.message, cases[i].status,
                     cases[i].code, cases[i].field);
        if (cases[i].message && strcmp(err.message, cases[i].message) != 0)
            fail_msg("%s: message \"%s\", want \"%s\"", cases[i].body, err.message,
                     cases[i].message);
    }
}

static void test_object_unknown_and_missing(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        { "{\"n\":5,\"zzz\":1}", 400, "unknown_field", "zzz", "unknown field zzz" },
        /* A typo is named as unknown, not reported as the required field missing. */
        { "{\"nn\":5}", 400, "unknown_field", "nn", NULL },
        { "{\"n\":5,\"model\":{\"d_model\":8,\"typo\":1}}", 400, "unknown_field",
          "model.typo", "unknown field model.typo" },
        { "{\"n\":5,\"model\":{\"d_model\":8,\"inner\":{\"k\":1,\"q\":2}}}", 400,
          "unknown_field", "model.inner.q", NULL },
        { "{}", 400, "missing_field", "n", "n is required" },
        { "{\"n\":5,\"model\":{}}", 400, "missing_field", "model.d_model",
          "model.d_model is required" },
        { "{\"n\":5,\"model\":{\"d_model\":8,\"inner\":{}}}", 400, "missing_field",
          "model.inner.k", NULL },
        /* null on a non-nullable required field is a type error, not "absent". */
        { "{\"n\":null}", 400, "invalid_field", "n", NULL },
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_object_wrong_types(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        { "{\"n\":\"5\"}", 400, "invalid_field", "n", "n must be an integer" },
        { "{\"n\":2.5}", 400, "invalid_field", "n", "n must be an integer" },
        { "{\"n\":5.0}", 400, "invalid_field", "n", NULL },   /* a real, even if whole */
        { "{\"n\":true}", 400, "invalid_field", "n", NULL },
        { "{\"n\":[5]}", 400, "invalid_field", "n", NULL },
        { "{\"n\":5,\"x\":\"0.5\"}", 400, "invalid_field", "x", "x must be a number" },
        { "{\"n\":5,\"x\":false}", 400, "invalid_field", "x", NULL },
        { "{\"n\":5,\"x\":null}", 400, "invalid_field", "x", NULL },
        { "{\"n\":5,\"s\":5}", 400, "invalid_field", "s", "s must be a string" },
        { "{\"n\":5,\"b\":1}", 400, "invalid_field", "b", "b must be true or false" },
        { "{\"n\":5,\"b\":\"true\"}", 400, "invalid_field", "b", NULL },
        { "{\"n\":5,\"model\":5}", 400, "invalid_field", "model", "model must be an object" },
        { "{\"n\":5,\"model\":[]}", 400, "invalid_field", "model", NULL },
        { "{\"n\":5,\"model\":{\"d_model\":\"8\"}}", 400, "invalid_field", "model.d_model",
          "model.d_model must be an integer" },
        { "{\"n\":5,\"s\":\"a\\u0000b\"}", 400, "invalid_field", "s",
          "s must not contain NUL characters" },
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_object_ranges_and_choices(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        { "{\"n\":0}", 422, "invalid_field", "n", "n must be an integer between 1 and 100" },
        { "{\"n\":101}", 422, "invalid_field", "n", NULL },
        { "{\"n\":-9223372036854775808}", 422, "invalid_field", "n", NULL },
        { "{\"n\":9223372036854775807}", 422, "invalid_field", "n", NULL },
        { "{\"n\":5,\"x\":1.5}", 422, "invalid_field", "x", "x must be a number between 0 and 1" },
        { "{\"n\":5,\"x\":-0.001}", 422, "invalid_field", "x", NULL },
        { "{\"n\":5,\"x\":2}", 422, "invalid_field", "x", NULL },   /* integer for a number */
        { "{\"n\":5,\"s\":\"\"}", 422, "invalid_field", "s",
          "s must be a string with a length in bytes between 1 and 5" },
        { "{\"n\":5,\"s\":\"abcdef\"}", 422, "invalid_field", "s", NULL },
        /* The char array (4 bytes) is tighter than max (100): bound reported is 3. */
        { "{\"n\":5,\"tag\":\"abcd\"}", 422, "invalid_field", "tag",
          "tag must be a string with a length in bytes between 0 and 3" },
        { "{\"n\":5,\"color\":\"blue\"}", 422, "invalid_field", "color",
          "color must be one of \"red\", \"green\"" },
        { "{\"n\":5,\"color\":\"Red\"}", 422, "invalid_field", "color", NULL },
        { "{\"n\":5,\"opt\":-6}", 422, "invalid_field", "opt", "opt must be an integer between -5 and 5" },
        { "{\"n\":5,\"model\":{\"d_model\":0}}", 422, "invalid_field", "model.d_model",
          "model.d_model must be an integer between 1 and 1024" },
        { "{\"n\":5,\"model\":{\"d_model\":8,\"inner\":{\"k\":11}}}", 422, "invalid_field",
          "model.inner.k", NULL },
        /* 2^53 is past a max of 2^53-1 even though doubles round near there. */
        { "{\"n\":5,\"big\":9007199254740992}", 422, "invalid_field", "big",
          "big must be an integer between 0 and 9.007199255e+15" },
        { "{\"n\":5,\"big\":9007199254740993}", 422, "invalid_field", "big", NULL },
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_object_accepts_and_copies(void **state)
{
    (void)state;
    struct thing t;
    struct shoal_err err;
    assert_int_equal(validate("{\"n\":100,\"x\":1,\"s\":\"abcde\",\"b\":false,"
                              "\"color\":\"green\",\"opt\":-5,\"tag\":\"abc\","
                              "\"model\":{\"d_model\":1024,\"inner\":{\"k\":0}},"
                              "\"big\":9007199254740991}",
                              &t, &err),
                     0);
    assert_int_equal(err.status, 0);
    assert_int_equal(t.n, 100);
    assert_true(t.x == 1.0);
    assert_string_equal(t.s, "abcde");
    assert_int_equal(t.b, 0);
    assert_string_equal(t.color, "green");
    assert_int_equal(t.opt, -5);
    assert_string_equal(t.tag, "abc");
    assert_int_equal(t.d_model, 1024);
    assert_int_equal(t.k, 0);
    assert_int_equal(t.big, 9007199254740991LL);

    assert_int_equal(validate("{\"n\":1,\"x\":0,\"b\":true,\"tag\":\"\"}", &t, &err), 0);
    assert_int_equal(t.n, 1);
    assert_true(t.x == 0.0);
    assert_int_equal(t.b, 1);
    assert_string_equal(t.tag, "");
}

static void test_object_defaults_kept_when_absent(void **state)
{
    (void)state;
    struct thing t, want;
    struct shoal_err err;
    thing_defaults(&want);
    want.n = 5;
    assert_int_equal(validate("{\"n\":5}", &t, &err), 0);
    assert_memory_equal(&t, &want, sizeof t);

    /* null on a nullable field means absent: the default stays. */
    assert_int_equal(validate("{\"n\":5,\"opt\":null}", &t, &err), 0);
    assert_memory_equal(&t, &want, sizeof t);
    assert_int_equal(validate("{\"n\":5,\"model\":{\"d_model\":64,\"inner\":null}}", &t, &err), 0);
    assert_memory_equal(&t, &want, sizeof t);

    /* Present values overwrite defaults; the rest stay. */
    assert_int_equal(validate("{\"n\":5,\"opt\":0,\"x\":0.5}", &t, &err), 0);
    want.opt = 0;
    want.x = 0.5;
    assert_memory_equal(&t, &want, sizeof t);
}

static void test_object_top_level_not_object(void **state)
{
    (void)state;
    struct thing t;
    struct shoal_err err;
    json_t *arr = json_array();
    thing_defaults(&t);
    err_clear(&err);
    assert_int_equal(jv_object(arr, thing_fields, "", &t, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "invalid_field");
    assert_string_equal(err.message, "the request body must be an object");
    json_decref(arr);

    /* With a prefix, the path names the member. */
    json_t *num = json_integer(3);
    err_clear(&err);
    assert_int_equal(jv_object(num, model_fields, "spec.model", &t, &err), -1);
    assert_string_equal(err.field, "spec.model");
    json_decref(num);

    /* And a prefix is joined onto nested paths. */
    json_t *obj = json_pack("{s:i}", "d_model", 0);
    err_clear(&err);
    assert_int_equal(jv_object(obj, model_fields, "spec", &t, &err), -1);
    assert_string_equal(err.field, "spec.d_model");
    json_decref(obj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_rejects_bad_bodies),
        cmocka_unit_test(test_parse_error_names_line_and_column),
        cmocka_unit_test(test_parse_accepts_objects_and_respects_len),
        cmocka_unit_test(test_parse_deep_nesting_does_not_crash),
        cmocka_unit_test(test_errors_stay_utf8),
        cmocka_unit_test(test_object_unknown_and_missing),
        cmocka_unit_test(test_object_wrong_types),
        cmocka_unit_test(test_object_ranges_and_choices),
        cmocka_unit_test(test_object_accepts_and_copies),
        cmocka_unit_test(test_object_defaults_kept_when_absent),
        cmocka_unit_test(test_object_top_level_not_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
