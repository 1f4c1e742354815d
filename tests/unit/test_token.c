/* test_token.c - common/token.h: generation, SHA-256, comparison, shape. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "../../common/token.h"

static int is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static void test_token_generate_prefix_and_64_hex(void **state)
{
    (void)state;
    static const char *const prefixes[] = { "shoal_admin_", "shoal_node_", "" };
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        char tok[TOKEN_MAX];
        memset(tok, 'Z', sizeof tok);
        size_t plen = strlen(prefixes[i]);
        assert_int_equal(token_generate(prefixes[i], tok, sizeof tok), 0);
        assert_int_equal(strlen(tok), plen + 64);
        assert_memory_equal(tok, prefixes[i], plen);
        assert_true(is_lower_hex(tok + plen, 64));
        assert_true(token_well_formed(tok));
    }
}

static void test_token_generate_two_differ(void **state)
{
    (void)state;
    char a[TOKEN_MAX], b[TOKEN_MAX];
    assert_int_equal(token_generate("shoal_admin_", a, sizeof a), 0);
    assert_int_equal(token_generate("shoal_admin_", b, sizeof b), 0);
    assert_string_not_equal(a, b);
    assert_false(token_equal(a, b));
}

static void test_token_generate_buffer_size(void **state)
{
    (void)state;
    const char *prefix = "shoal_node_";
    size_t need = strlen(prefix) + 64 + 1;   /* prefix, 64 hex, NUL */
    char out[TOKEN_MAX];

    /* One byte short: refused, and nothing written. */
    memset(out, 'Z', sizeof out);
    assert_int_equal(token_generate(prefix, out, need - 1), -1);
    for (size_t i = 0; i < sizeof out; i++)
        assert_int_equal(out[i], 'Z');
    assert_int_equal(token_generate(prefix, out, 0), -1);

    /* Exactly enough: accepted, NUL in the last byte, nothing past it. */
    assert_int_equal(token_generate(prefix, out, need), 0);
    assert_int_equal(out[need - 1], '\0');
    assert_int_equal(strlen(out), need - 1);
    for (size_t i = need; i < sizeof out; i++)
        assert_int_equal(out[i], 'Z');
}

static void test_token_sha256_known_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *hex;
    } cases[] = {
        { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hex[TOKEN_HASH_HEX];
        memset(hex, 'Z', sizeof hex);
        token_sha256_hex(cases[i].in, strlen(cases[i].in), hex);
        assert_string_equal(hex, cases[i].hex);
    }
    /* Length, not NUL, bounds the input. */
    char hex[TOKEN_HASH_HEX];
    token_sha256_hex("abcdef", 3, hex);
    assert_string_equal(hex, cases[0].hex);
}

static void test_token_equal(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        int want;
    } cases[] = {
        { "shoal_admin_0123", "shoal_admin_0123", 1 },
        { "", "", 1 },
        { "shoal_admin_0123", "shoal_admin_0124", 0 },   /* last byte */
        { "Xhoal_admin_0123", "shoal_admin_0123", 0 },   /* first byte */
        { "abc", "abcd", 0 },                            /* prefix of the other */
        { "abcd", "abc", 0 },
        { "abc", "", 0 },
        { "", "abc", 0 },
        { "ABC", "abc", 0 },                             /* case matters */
        /* The SHA-256 of these two share their first 4 bytes (d9b5e5a7...): a
         * comparison of only the first few hash bytes would call them equal. */
        { "shoal_15263", "shoal_42343", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = token_equal(cases[i].a, cases[i].b);
        if (got != cases[i].want)
            fail_msg("token_equal(\"%s\", \"%s\") = %d, want %d", cases[i].a, cases[i].b, got,
                     cases[i].want);
    }
}

static void test_token_well_formed(void **state)
{
    (void)state;
    char len127[128], len128[129], len300[301];
    memset(len127, 'a', 127);
    len127[127] = '\0';
    memset(len128, 'a', 128);
    len128[128] = '\0';
    memset(len300, 'a', 300);
    len300[300] = '\0';
    static const char with_del[] = { 'a', 0x7f, 'b', '\0' };
    static const char with_high[] = { 'a', (char)0xc3, (char)0xa9, '\0' };   /* UTF-8 e-acute */
    const struct {
        const char *what;
        const char *s;
        int want;
    } cases[] = {
        { "empty", "", 0 },
        { "one char", "x", 1 },
        { "typical", "shoal_admin_0123456789abcdef", 1 },
        { "punctuation", "a.b-c_d~e!f", 1 },
        { "space inside", "shoal admin", 0 },
        { "leading space", " shoal", 0 },
        { "trailing space", "shoal ", 0 },
        { "tab", "a\tb", 0 },
        { "newline", "abc\n", 0 },
        { "control char", "a\x01" "b", 0 },
        { "DEL", with_del, 0 },
        { "non-ASCII", with_high, 0 },
        { "127 chars (TOKEN_MAX-1)", len127, 1 },
        { "128 chars", len128, 0 },
        { "300 chars", len300, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = token_well_formed(cases[i].s);
        if (got != cases[i].want)
            fail_msg("token_well_formed(%s) = %d, want %d", cases[i].what, got, cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_generate_prefix_and_64_hex),
        cmocka_unit_test(test_token_generate_two_differ),
        cmocka_unit_test(test_token_generate_buffer_size),
        cmocka_unit_test(test_token_sha256_known_vectors),
        cmocka_unit_test(test_token_equal),
        cmocka_unit_test(test_token_well_formed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
