/* test_bpe.c - agent/tools/bpe.h at the edges of what tiktoken and Hugging
 * Face's library do: `\s` is Unicode's White_Space (U+180E is not in it,
 * though PCRE2's own `\s` holds it), a Sequence normalizer of nothing is no
 * normalizer, and a Split pre-tokenizer cuts as its behavior and invert say
 * (tokenizers' NormalizedString::split).  Each tokenizer.json is written
 * here: the 256 bytes as ids 0..255 in GPT-2's byte-level alphabet, then a
 * few merges whose ids show where the pieces were cut (a merge never
 * crosses a piece's edge). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/tools/bpe.h"
#include "../../agent/tools/bpe_pattern.h"

#define WS BPE_WHITE_SPACE

/* Byte b's character in GPT-2's byte-level alphabet, as UTF-8. */
static void alphabet(unsigned b, char out[3])
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    unsigned cp = b;
    if (!printable) {
        cp = 256;
        for (unsigned k = 0; k < b; k++)
            cp += !((k >= '!' && k <= '~') || (k >= 0xa1 && k <= 0xac) || (k >= 0xae && k <= 0xff));
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

/* Raw bytes in the alphabet, into out (cap bytes, at least 1). */
static void spell(const char *raw, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
        char c[3];
        alphabet(*p, c);
        int n = snprintf(out + len, cap - len, "%s", c);
        assert_true(n >= 0 && (size_t)n < cap - len);
        len += (size_t)n;
    }
}

/* A tokenizer.json: the bytes, then merges[k] (two raw byte strings) as id
 * 256 + k, rank k; the pre-tokenizer and normalizer as given (stolen). */
static int load(struct bpe *b, const char *const merges[][2], size_t n_merges, json_t *pre, json_t *norm,
                struct shoal_err *err)
{
    json_t *vocab = json_object(), *list = json_array();
    char l[64], r[64], both[128];
    for (unsigned c = 0; c < 256; c++) {
        char s[3];
        alphabet(c, s);
        json_object_set_new(vocab, s, json_integer(c));
    }
    for (size_t k = 0; k < n_merges; k++) {
        spell(merges[k][0], l, sizeof l);
        spell(merges[k][1], r, sizeof r);
        snprintf(both, sizeof both, "%s%s", l, r);
        json_object_set_new(vocab, both, json_integer(256 + (json_int_t)k));
        snprintf(both, sizeof both, "%s %s", l, r);
        json_array_append_new(list, json_string(both));
    }
    json_t *doc = json_pack("{s:{s:s, s:o, s:o}, s:[], s:o, s:o}", "model", "type", "BPE", "vocab", vocab,
                            "merges", list, "added_tokens", "normalizer", norm ? norm : json_null(),
                            "pre_tokenizer", pre ? pre : json_null());
    assert_non_null(doc);
    char *text = json_dumps(doc, JSON_COMPACT);
    int rc = bpe_load((const unsigned char *)text, strlen(text), "test.json", "hf", NULL, b, err);
    free(text);
    json_decref(doc);
    return rc;
}

/* text's ids equal want (n of them, -1 ends a shorter list). */
static void expect_ids(const struct bpe *b, const char *text, const int *want, size_t n, const char *what)
{
    struct bpe_work w = {0};
    struct bpe_ids ids = {0};
    struct shoal_err err = {0};
    assert_int_equal(bpe_encode(b, &w, text, strlen(text), &ids, &err), 0);
    int same = ids.n == n;
    for (size_t i = 0; same && i < n; i++)
        same = ids.id[i] == (uint32_t)want[i];
    if (!same) {
        char got[512] = "";
        for (size_t i = 0; i < ids.n && strlen(got) < sizeof got - 12; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %u", ids.id[i]);
        fail_msg("%s: ids%s", what, got);
    }
    bpe_ids_free(&ids);
    bpe_work_free(&w);
}

#define EXPECT(b, text, what, ...) do { \
        static const int want_[] = { __VA_ARGS__ }; \
        expect_ids(b, text, want_, sizeof want_ / sizeof want_[0], what); \
    } while (0)

static void test_pattern_spelling(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        { "\\s+(?!\\S)|\\s+", "[" WS "]+(?![^" WS "])|[" WS "]+" },
        { " ?[^\\s\\p{L}\\p{N}]+", " ?[^" WS "\\p{L}\\p{N}]+" },
        { "[\\s\\S]", "(?:[^" WS "]|[" WS "])" },          /* any character */
        { "[^\\S]", "[" WS "]" },
        { "[\\S]", "[^" WS "]" },
        { "[^a\\S]", "(?:(?![a])[" WS "])" },                /* White_Space but 'a' */
        { "[\\S^]", "(?:[^" WS "]|[\\^])" },                 /* the '^' stays a character */
        { "\\\\s", "\\\\s" },                               /* a backslash, then s */
        { "\\Q\\s\\E\\s", "\\Q\\s\\E[" WS "]" },            /* quoted text stays */
        { "[]\\s]", "[]" WS "]" },                          /* a ']' first is a character */
        { "[\\]\\s]x", "[\\]" WS "]x" },
        { "[[:alpha:]\\s]", "[[:alpha:]" WS "]" },
        { "\\p{L}+", "\\p{L}+" },
    };
    char out[1024], why[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(bpe_pattern_white_space(cases[i].in, out, sizeof out, why, sizeof why), 0);
        if (strcmp(out, cases[i].out) != 0)
            fail_msg("'%s' became '%s', not '%s'", cases[i].in, out, cases[i].out);
    }
    assert_int_equal(bpe_pattern_white_space("a\\sb", out, 12, why, sizeof why), -1);
    assert_non_null(strstr(why, "passes 11 bytes"));
}

/* GPT-2's split (ByteLevel's regex), with "  " (rank 0) and " \xe1" (rank
 * 1) as merges: U+180E (e1 a0 8e) after two spaces.  It is no White_Space,
 * so the pieces are "x", " " and " \u180e" (` ?[^\s\p{L}\p{N}]+`), as tiktoken
 * and Hugging Face's library cut them; as whitespace (PCRE2's \s) the three
 * would be one piece and merge "  " first. */
static void test_white_space_is_unicodes(void **state)
{
    (void)state;
    static const char *const merges[][2] = { { " ", " " }, { " ", "\xe1" } };
    struct bpe b;
    struct shoal_err err = {0};
    assert_int_equal(load(&b, merges, 2, json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                                   "use_regex", 1), NULL, &err), 0);
    EXPECT(&b, "x  \xe1\xa0\x8e", "U+180E is not White_Space", 'x', ' ', 257, 0xa0, 0x8e);
    /* U+2003 (EM SPACE) and U+0085 (NEL) are: one run of spaces to the end */
    EXPECT(&b, "x  \xe2\x80\x83", "U+2003 is White_Space", 'x', 256, 0xe2, 0x80, 0x83);
    EXPECT(&b, "x  \xc2\x85", "U+0085 is White_Space", 'x', 256, 0xc2, 0x85);
    /* a space before a letter goes with it; before U+180E too (not a space) */
    EXPECT(&b, "\xe1\xa0\x8e \xe1\xa0\x8e", "U+180E after one space", 0xe1, 0xa0, 0x8e, 257, 0xa0, 0x8e);
    bpe_free(&b);
}

static void test_normalizer_sequence(void **state)
{
    (void)state;
    struct bpe b;
    struct shoal_err err = {0};
    /* DeepSeek-V3's: a Sequence of nothing normalises nothing */
    assert_int_equal(load(&b, NULL, 0, NULL, json_pack("{s:s, s:[]}", "type", "Sequence", "normalizers"), &err), 0);
    assert_int_equal(b.nfc, 0);
    EXPECT(&b, "e\xcc\x81", "no NFC", 'e', 0xcc, 0x81);
    bpe_free(&b);
    /* a Sequence of NFC is NFC */
    assert_int_equal(load(&b, NULL, 0, NULL, json_pack("{s:s, s:[{s:s}]}", "type", "Sequence", "normalizers",
                                                       "type", "NFC"), &err), 0);
    EXPECT(&b, "e\xcc\x81", "NFC", 0xc3, 0xa9);
    bpe_free(&b);
    /* a Sequence holding what shoal does not do is refused, naming it */
    assert_int_equal(load(&b, NULL, 0, NULL, json_pack("{s:s, s:[{s:s}, {s:s}]}", "type", "Sequence",
                                                       "normalizers", "type", "NFC", "type", "Lowercase"), &err), -1);
    assert_int_equal(err.status, 422);
    assert_non_null(strstr(err.message, "normalizer Lowercase is not supported"));
    assert_null(b.bytes);
}

static json_t *split(json_t *pattern, const char *behavior, int invert)
{
    return json_pack("{s:s, s:o, s:s, s:b}", "type", "Split", "pattern", pattern, "behavior", behavior, "invert",
                     invert);
}

/* "the-final--countdown" split on "-" every way Hugging Face's Split
 * can; the merges "e-", "-f", "--", "l-", "-c" show which dashes a piece
 * holds and next to what. */
static void test_split_behaviors(void **state)
{
    (void)state;
    static const char *const merges[][2] = { { "e", "-" }, { "-", "f" }, { "-", "-" }, { "l", "-" }, { "-", "c" } };
    enum { E_ = 256, _F, DD, L_, _C };
    static const struct {
        const char *behavior;
        int invert;
        int ids[24];   /* ends at the first -1 */
    } cases[] = {
        { "Isolated", 0, { 't', 'h', 'e', '-', 'f', 'i', 'n', 'a', 'l', '-', '-', 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w',
                           'n', -1 } },
        { "Isolated", 1, { 't', 'h', 'e', '-', 'f', 'i', 'n', 'a', 'l', '-', '-', 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w',
                           'n', -1 } },
        { "Removed", 0, { 't', 'h', 'e', 'f', 'i', 'n', 'a', 'l', 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w', 'n', -1 } },
        { "Removed", 1, { '-', '-', '-', -1 } },   /* the matches are kept, the rest removed */
        { "MergedWithPrevious", 0, { 't', 'h', E_, 'f', 'i', 'n', 'a', L_, '-', 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w',
                                     'n', -1 } },
        { "MergedWithNext", 0, { 't', 'h', 'e', _F, 'i', 'n', 'a', 'l', '-', _C, 'o', 'u', 'n', 't', 'd', 'o', 'w', 'n',
                                 -1 } },
        { "Contiguous", 0, { 't', 'h', 'e', '-', 'f', 'i', 'n', 'a', 'l', DD, 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w', 'n',
                             -1 } },
        /* inverted, the words are the matches: each joins the dash before it */
        { "MergedWithPrevious", 1, { 't', 'h', 'e', _F, 'i', 'n', 'a', 'l', '-', _C, 'o', 'u', 'n', 't', 'd', 'o', 'w',
                                     'n', -1 } },
        { "Contiguous", 1, { 't', 'h', 'e', '-', 'f', 'i', 'n', 'a', 'l', DD, 'c', 'o', 'u', 'n', 't', 'd', 'o', 'w', 'n',
                             -1 } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bpe b;
        struct shoal_err err = {0};
        char what[64];
        size_t n = 0;
        snprintf(what, sizeof what, "%s%s", cases[i].behavior, cases[i].invert ? ", inverted" : "");
        json_t *pattern = i % 2 ? json_pack("{s:s}", "String", "-") : json_pack("{s:s}", "Regex", "-");
        if (load(&b, merges, 5, split(pattern, cases[i].behavior, cases[i].invert), NULL, &err) != 0)
            fail_msg("%s: %s", what, err.message);
        while (cases[i].ids[n] >= 0)
            n++;
        expect_ids(&b, "the-final--countdown", cases[i].ids, n, what);
        bpe_free(&b);
    }
}

/* Removed and inverted on a pattern that matches every character keeps
 * every character, each its own piece: Isolated's cut. */
static void test_removed_inverted_on_every_character(void **state)
{
    (void)state;
    static const char *const merges[][2] = { { "\xc3", "\xa9" }, { "a", "b" } };   /* é, ab */
    static const char *const patterns[] = { "[\\s\\S]", "(?s).", "\\X" };
    const char *text = "ab\xc3\xa9\n\xe1\xa0\x8e ab";
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++)
        for (int isolated = 0; isolated < 2; isolated++) {
            struct bpe b;
            struct shoal_err err = {0};
            json_t *pattern = json_pack("{s:s}", "Regex", patterns[p]);
            assert_int_equal(load(&b, merges, 2, split(pattern, isolated ? "Isolated" : "Removed", !isolated), NULL,
                                  &err), 0);
            EXPECT(&b, text, patterns[p], 'a', 'b', 256, '\n', 0xe1, 0xa0, 0x8e, ' ', 'a', 'b');
            bpe_free(&b);
        }
}

/* An empty match cuts where it is (Oniguruma's find_iter reports it, but
 * not where the last match ended); a String pattern is its text, not a
 * regex; what Split cannot be is refused, saying why. */
static void test_split_edges(void **state)
{
    (void)state;
    static const char *const merges[][2] = { { "a", "b" }, { "a", "." } };
    struct bpe b;
    struct shoal_err err = {0};
    assert_int_equal(load(&b, merges, 2, split(json_pack("{s:s}", "Regex", "x*"), "Isolated", 0), NULL, &err), 0);
    EXPECT(&b, "ab", "x* cuts between a and b", 'a', 'b');
    EXPECT(&b, "xxab", "x* after xx", 'x', 'x', 'a', 'b');
    bpe_free(&b);
    assert_int_equal(load(&b, merges, 2, split(json_pack("{s:s}", "String", "."), "Removed", 0), NULL, &err), 0);
    EXPECT(&b, "ab.ab", "String '.' is a dot", 256, 256);
    bpe_free(&b);
    assert_int_equal(load(&b, merges, 2, split(json_pack("{s:s}", "String", "b"), "MergedWithNext", 0), NULL, &err),
                     0);
    EXPECT(&b, "a.ab", "String 'b'", 257, 'a', 'b');
    bpe_free(&b);

    static const struct {
        const char *pattern_type, *pattern, *behavior;
        const char *says;
    } bad[] = {
        { "Regex", "-", "Sideways", "behavior Sideways: Isolated, Removed, MergedWithPrevious, MergedWithNext or "
                                    "Contiguous" },
        { "String", "", "Isolated", "an empty String pattern" },
        { "Glob", "-", "Isolated", "without a Regex or String pattern" },
        { "Regex", "(", "Isolated", "split pattern '(' does not compile" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *pattern = json_pack("{s:s}", bad[i].pattern_type, bad[i].pattern);
        assert_int_equal(load(&b, merges, 2, split(pattern, bad[i].behavior, 0), NULL, &err), -1);
        assert_int_equal(err.status, 422);
        if (!strstr(err.message, bad[i].says))
            fail_msg("case %zu: \"%s\"; want \"%s\"", i, err.message, bad[i].says);
        assert_null(b.bytes);
    }
    json_t *inv = json_pack("{s:s, s:{s:s}, s:s, s:s}", "type", "Split", "pattern", "Regex", "-", "behavior",
                            "Isolated", "invert", "yes");
    assert_int_equal(load(&b, merges, 2, inv, NULL, &err), -1);
    assert_non_null(strstr(err.message, "invert is not true or false"));
}

/* The Unicode version a dataset records (tokenize's dataset.json): PCRE2's,
 * as "major.minor.update", and newer than 6.3, where U+180E left
 * White_Space. */
static void test_unicode_version(void **state)
{
    (void)state;
    char v[BPE_UNICODE_VERSION_MAX];
    int major = 0, minor = 0, update = 0, end = 0;
    const char *got = bpe_unicode_version(v);
    assert_ptr_equal(got, v);
    if (sscanf(v, "%d.%d.%d%n", &major, &minor, &update, &end) != 3 || v[end] != 0)
        fail_msg("Unicode version '%s' is not major.minor.update", v);
    assert_true(major > 6 || (major == 6 && minor >= 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pattern_spelling),
        cmocka_unit_test(test_white_space_is_unicodes),
        cmocka_unit_test(test_normalizer_sequence),
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_removed_inverted_on_every_character),
        cmocka_unit_test(test_split_edges),
        cmocka_unit_test(test_unicode_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
