/* test_buf.c - common/buf.h: appends, printf, the hard cap, NUL termination. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "../../common/buf.h"

/* Fails unless `b` holds exactly the `n` bytes at `want` followed by a NUL. */
static void expect_contents(const struct buf *b, const char *want, size_t n)
{
    assert_int_equal(b->len, n);
    assert_non_null(b->data);
    assert_memory_equal(b->data, want, n);
    assert_int_equal(b->data[n], '\0');
    assert_true(b->alloc > b->len);
}

static void test_buf_init_is_empty(void **state)
{
    (void)state;
    struct buf b;
    memset(&b, 0xab, sizeof b);
    buf_init(&b, 1024);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.alloc, 0);
    assert_int_equal(b.limit, 1024);
    buf_free(&b);
}

static void test_buf_append_concatenates_and_terminates(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    expect_contents(&b, "abc", 3);
    assert_int_equal(buf_append(&b, "de", 2), 0);
    expect_contents(&b, "abcde", 5);
    /* Binary data with an embedded NUL is kept byte for byte. */
    assert_int_equal(buf_append(&b, "x\0y", 3), 0);
    expect_contents(&b, "abcdex\0y", 8);
    /* Zero bytes: a no-op that still succeeds. */
    assert_int_equal(buf_append(&b, "", 0), 0);
    expect_contents(&b, "abcdex\0y", 8);
    buf_free(&b);
}

static void test_buf_append_zero_to_empty_gives_empty_string(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 16);
    assert_int_equal(buf_append(&b, "", 0), 0);
    expect_contents(&b, "", 0);
    buf_free(&b);
}

static void test_buf_grows_past_first_allocation(void **state)
{
    (void)state;
    /* Sizes chosen to cross the 256-byte first allocation and a few doublings. */
    static const size_t chunks[] = { 1, 255, 1, 256, 511, 1024, 3000 };
    char want[8192];
    size_t total = 0;
    struct buf b;
    buf_init(&b, sizeof want);
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        char piece[4096];
        for (size_t j = 0; j < chunks[i]; j++)
            piece[j] = (char)('a' + (total + j) % 26);
        assert_int_equal(buf_append(&b, piece, chunks[i]), 0);
        memcpy(want + total, piece, chunks[i]);
        total += chunks[i];
        expect_contents(&b, want, total);
    }
    buf_free(&b);
}

static void test_buf_printf_formats_and_appends(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(buf_printf(&b, "%d-%s", 42, "x"), 0);
    expect_contents(&b, "42-x", 4);
    assert_int_equal(buf_printf(&b, "%s", ""), 0);
    expect_contents(&b, "42-x", 4);
    assert_int_equal(buf_printf(&b, "|%5.2f|", 3.14159), 0);
    expect_contents(&b, "42-x| 3.14|", 11);
    /* Longer than the first allocation. */
    char big[1001];
    memset(big, 'z', 1000);
    big[1000] = '\0';
    assert_int_equal(buf_printf(&b, "%s", big), 0);
    assert_int_equal(b.len, 1011);
    assert_string_equal(b.data + 11, big);
    buf_free(&b);
}

/* Every way of reaching the cap: the last byte that fits is accepted, the
 * first byte past it is refused and the buffer is left exactly as it was. */
static void test_buf_cap_is_exact(void **state)
{
    (void)state;
    static const struct {
        size_t limit;
        size_t first;    /* bytes appended first (must fit) */
        size_t second;   /* then this many */
        int use_printf;  /* second append through buf_printf */
        int second_ok;
    } cases[] = {
        { 0, 0, 0, 0, 1 },
        { 0, 0, 1, 0, 0 },
        { 0, 0, 1, 1, 0 },
        { 10, 0, 10, 0, 1 },
        { 10, 0, 11, 0, 0 },
        { 10, 0, 10, 1, 1 },
        { 10, 0, 11, 1, 0 },
        { 10, 7, 3, 0, 1 },
        { 10, 7, 4, 0, 0 },
        { 10, 7, 3, 1, 1 },
        { 10, 7, 4, 1, 0 },
        { 10, 10, 0, 0, 1 },
        { 10, 10, 1, 0, 0 },
        { 10, 10, 1, 1, 0 },
        { 300, 256, 44, 0, 1 },   /* exactly at the cap across a reallocation */
        { 300, 256, 45, 0, 0 },
        { 300, 256, 44, 1, 1 },
        { 300, 256, 45, 1, 0 },
    };
    char src[512];
    for (size_t j = 0; j < sizeof src; j++)
        src[j] = (char)('A' + j % 26);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct buf b;
        buf_init(&b, cases[i].limit);
        assert_int_equal(buf_append(&b, src, cases[i].first), 0);
        /* Snapshot to prove a refused append changes nothing. */
        char *data_before = b.data;
        size_t len_before = b.len, alloc_before = b.alloc;
        char copy[512];
        if (b.data)
            memcpy(copy, b.data, b.len + 1);
        int rc;
        if (cases[i].use_printf)
            rc = buf_printf(&b, "%.*s", (int)cases[i].second, src + cases[i].first);
        else
            rc = buf_append(&b, src + cases[i].first, cases[i].second);
        if (cases[i].second_ok) {
            if (rc != 0)
                fail_msg("case %zu: %zu+%zu bytes under limit %zu refused", i,
                         cases[i].first, cases[i].second, cases[i].limit);
            expect_contents(&b, src, cases[i].first + cases[i].second);
            assert_true(b.len <= b.limit);
        } else {
            if (rc != -1)
                fail_msg("case %zu: %zu+%zu bytes under limit %zu accepted", i,
                         cases[i].first, cases[i].second, cases[i].limit);
            assert_ptr_equal(b.data, data_before);
            assert_int_equal(b.len, len_before);
            assert_int_equal(b.alloc, alloc_before);
            if (b.data)
                assert_memory_equal(b.data, copy, len_before + 1);
        }
        buf_free(&b);
    }
}

static void test_buf_cap_rejects_size_overflow(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 16);
    assert_int_equal(buf_append(&b, "abcd", 4), 0);
    /* A length that would wrap len + n must be refused, not wrap past the cap. */
    assert_int_equal(buf_append(&b, "x", SIZE_MAX), -1);
    assert_int_equal(buf_append(&b, "x", SIZE_MAX - 3), -1);
    expect_contents(&b, "abcd", 4);
    buf_free(&b);
}

static void test_buf_free_allows_reuse(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(buf_append(&b, "12345678", 8), 0);
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.limit, 8);
    assert_int_equal(buf_append(&b, "abcdefgh", 8), 0);
    expect_contents(&b, "abcdefgh", 8);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_init_is_empty),
        cmocka_unit_test(test_buf_append_concatenates_and_terminates),
        cmocka_unit_test(test_buf_append_zero_to_empty_gives_empty_string),
        cmocka_unit_test(test_buf_grows_past_first_allocation),
        cmocka_unit_test(test_buf_printf_formats_and_appends),
        cmocka_unit_test(test_buf_cap_is_exact),
        cmocka_unit_test(test_buf_cap_rejects_size_overflow),
        cmocka_unit_test(test_buf_free_allows_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
