#include "token.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

int token_generate(const char *prefix, char *out, size_t out_len)
{
    unsigned char raw[32];
    size_t plen = strlen(prefix);
    if (out_len < plen + 2 * sizeof raw + 1)
        return -1;
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0)
            return -1;
        got += (size_t)n;
    }
    memcpy(out, prefix, plen);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + plen + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

void token_sha256_hex(const void *data, size_t len, char hex[TOKEN_HASH_HEX])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(data, len, digest);
    for (size_t i = 0; i < sizeof digest; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

int token_equal(const char *a, const char *b)
{
    unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)a, strlen(a), da);
    SHA256((const unsigned char *)b, strlen(b), db);
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < sizeof da; i++)
        diff |= da[i] ^ db[i];
    return diff == 0;
}

int token_well_formed(const char *s)
{
    size_t n = strnlen(s, TOKEN_MAX);
    if (n == 0 || n >= TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] <= 0x20 || s[i] >= 0x7f)
            return 0;
    }
    return 1;
}
