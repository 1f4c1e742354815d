/* sha256.c - the SHA-256 of a file (sha256.h). */
#include "sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

int sha256_file_hex(const char *path, char hex[SHA256_HEX], struct shoal_err *err)
{
    unsigned char md[32], chunk[1 << 16];
    unsigned len = 0;
    int rc = -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    FILE *f = fopen(path, "rb");
    if (!f || !ctx) {
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", path, f ? "out of memory" : strerror(errno));
        goto out;
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        EVP_DigestUpdate(ctx, chunk, n);
    if (ferror(f)) {
        err_set(err, 500, "io_error", NULL, "cannot read %s", path);
        goto out;
    }
    EVP_DigestFinal_ex(ctx, md, &len);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    rc = 0;
out:
    if (f)
        fclose(f);
    EVP_MD_CTX_free(ctx);
    return rc;
}

void sha256_hex(const void *bytes, size_t len, char hex[SHA256_HEX])
{
    unsigned char md[32];
    unsigned got = 0;
    EVP_Digest(bytes, len, md, &got, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}
