/* buf.h - a growable byte buffer with a hard cap.
 *
 * The cap is part of the API: an append that would pass it fails and leaves
 * the buffer as it was, so input can never grow memory without bound.
 * The contents are always NUL-terminated (the NUL is not counted in len). */
#ifndef SHOAL_BUF_H
#define SHOAL_BUF_H

#include <stddef.h>

struct buf {
    char *data;     /* owned; NULL until the first append */
    size_t len;     /* bytes used, excluding the terminating NUL */
    size_t alloc;   /* bytes allocated */
    size_t limit;   /* hard cap on len, bytes */
};

/* Starts an empty buffer that will never hold more than `limit` bytes. */
void buf_init(struct buf *b, size_t limit);

/* Appends `n` bytes.  Returns 0, or -1 (buffer unchanged) if the cap would
 * be passed or memory is short. */
int buf_append(struct buf *b, const void *data, size_t n);

/* Appends printf-formatted text; same contract as buf_append. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees the contents; the buffer can be reused after buf_init. */
void buf_free(struct buf *b);

#endif
