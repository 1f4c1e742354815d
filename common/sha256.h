/* sha256.h - the SHA-256 of a file, streamed (checkpoint files are
 * gigabytes; they are never held in memory whole). */
#ifndef SHOAL_SHA256_H
#define SHOAL_SHA256_H

#include <stddef.h>

#include "err.h"

#define SHA256_HEX 65   /* 64 lowercase hex digits and the NUL */

/* Writes the lowercase hex SHA-256 of the file at `path` into `hex`.
 * Returns 0, or -1 with err set (500 "io_error") when it cannot be read. */
int sha256_file_hex(const char *path, char hex[SHA256_HEX], struct shoal_err *err);

/* The SHA-256 of `len` bytes in memory (a mapped file), as hex. */
void sha256_hex(const void *bytes, size_t len, char hex[SHA256_HEX]);

#endif
