/* bytes_fixture.h - a growing byte buffer the file-writing suites build
 * test files in.  Include after cmocka.h. */
#ifndef SHOAL_TEST_BYTES_FIXTURE_H
#define SHOAL_TEST_BYTES_FIXTURE_H

#include <stdlib.h>
#include <string.h>

struct bytes {
    unsigned char *p;
    size_t n, cap;
};

static __attribute__((unused)) void put_bytes(struct bytes *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

#endif
