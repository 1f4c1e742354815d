/* test_err.c - common/err.h: a message or field cut to fit stays valid UTF-8. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "../../common/err.h"

/* 1 if s is well-formed UTF-8 as far as lead and continuation bytes go. */
static int utf8_whole(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80 ? 1 : *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC0 ? 2 : 0;
        if (n == 0)
            return 0;
        for (size_t i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

static void test_cut_never_splits_a_character(void **state)
{
    (void)state;
    /* "é" (2 bytes), "€" (3), "𝄞" (4) repeated past the message size, at
     * every offset, so the cut lands at every position inside each. */
    static const char *const chars[] = { "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9D\x84\x9E" };
    for (size_t c = 0; c < 3; c++) {
        for (size_t pad = 0; pad < 4; pad++) {
            char text[1200];
            size_t len = pad, clen = strlen(chars[c]);
            memset(text, 'a', pad);
            for (; len + clen < sizeof text; len += clen)
                memcpy(text + len, chars[c], clen);
            text[len] = '\0';
            struct shoal_err e;
            err_set(&e, 400, "invalid_field", text, "%s", text);
            assert_true(utf8_whole(e.message));
            assert_true(utf8_whole(e.field));
            assert_true(strlen(e.message) >= sizeof e.message - 4);
            assert_true(strlen(e.field) >= sizeof e.field - 4);
        }
    }
}

static void test_short_text_is_kept_whole(void **state)
{
    (void)state;
    struct shoal_err e;
    assert_int_equal(err_set(&e, 422, "invalid_field", "model.d_model", "caf\xC3\xA9 %d", 7), -1);
    assert_string_equal(e.message, "caf\xC3\xA9 7");
    assert_string_equal(e.field, "model.d_model");
    assert_int_equal(e.status, 422);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_never_splits_a_character),
        cmocka_unit_test(test_short_text_is_kept_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
