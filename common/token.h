/* token.h - bearer tokens: generation, hashing, constant-time comparison.
 *
 * Tokens are 32 random bytes from the kernel, written as 64 hex digits after
 * a prefix that says what kind of token it is ("shoal_admin_", ...).  Node
 * tokens are stored only as their SHA-256. */
#ifndef SHOAL_TOKEN_H
#define SHOAL_TOKEN_H

#include <stddef.h>

#define TOKEN_MAX 128        /* bytes, including the NUL; longer tokens are rejected */
#define TOKEN_HASH_HEX 65    /* 64 hex digits of SHA-256 plus the NUL */

/* Writes `prefix` followed by 64 random hex digits into `out`.
 * Returns 0, or -1 if `out` is too small or the kernel gives no randomness. */
int token_generate(const char *prefix, char *out, size_t out_len);

/* Writes the lowercase hex SHA-256 of `len` bytes at `data` into `hex`. */
void token_sha256_hex(const void *data, size_t len, char hex[TOKEN_HASH_HEX]);

/* 1 if the two NUL-terminated strings are equal, else 0, in time that does
 * not depend on where they differ (both are hashed, then compared fully). */
int token_equal(const char *a, const char *b);

/* 1 if `s` looks like a token: 1..TOKEN_MAX-1 printable ASCII, no spaces. */
int token_well_formed(const char *s);

#endif
