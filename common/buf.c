#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->limit = limit;
}

/* Makes room for `extra` more bytes plus the NUL, doubling as it grows. */
static int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > b->limit || b->len > b->limit - extra)
        return -1;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return 0;
    size_t alloc = b->alloc ? b->alloc : 256;
    while (alloc < need)
        alloc *= 2;
    char *p = realloc(b->data, alloc);
    if (!p)
        return -1;
    b->data = p;
    b->alloc = alloc;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b, b->limit);
}
