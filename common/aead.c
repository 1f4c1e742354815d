/* aead.c - AES-256-GCM messages with counter nonces, and HKDF-SHA256
 * (aead.h). A thin layer over OpenSSL's EVP: the key schedule is computed
 * once per direction, each message only sets a new nonce. */
#include "aead.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>

#define UPDATE_MAX (1u << 30) /* bytes per EVP call: its lengths are ints */

struct aead {
    EVP_CIPHER_CTX *ctx;
    int seal; /* 1 encrypt, 0 decrypt */
};

struct aead *aead_new(const unsigned char key[AEAD_KEY_BYTES], int seal)
{
    struct aead *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->seal = seal ? 1 : 0;
    a->ctx = EVP_CIPHER_CTX_new();
    if (!a->ctx || EVP_CipherInit_ex(a->ctx, EVP_aes_256_gcm(), NULL, key, NULL, a->seal) != 1 ||
        EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_SET_IVLEN, AEAD_NONCE_BYTES, NULL) != 1) {
        aead_free(a);
        return NULL;
    }
    return a;
}

void aead_free(struct aead *a)
{
    if (!a)
        return;
    EVP_CIPHER_CTX_free(a->ctx); /* wipes the key schedule */
    free(a);
}

int aead_begin(struct aead *a, uint64_t counter, uint32_t part, const void *aad, size_t aad_len)
{
    unsigned char nonce[AEAD_NONCE_BYTES];
    int outl = 0;
    memcpy(nonce, &counter, 8); /* little-endian hosts only, like the wire format */
    memcpy(nonce + 8, &part, 4);
    if (EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, nonce, a->seal) != 1)
        return -1;
    if (aad_len && (aad_len > UPDATE_MAX ||
                    EVP_CipherUpdate(a->ctx, NULL, &outl, aad, (int)aad_len) != 1))
        return -1;
    return 0;
}

int aead_update(struct aead *a, void *out, const void *in, size_t n)
{
    unsigned char *o = out;
    const unsigned char *i = in;
    while (n) {
        int k = (int)(n < UPDATE_MAX ? n : UPDATE_MAX), outl = 0;
        if (EVP_CipherUpdate(a->ctx, o, &outl, i, k) != 1 || outl != k)
            return -1;
        o += k;
        i += k;
        n -= (size_t)k;
    }
    return 0;
}

int aead_seal_end(struct aead *a, unsigned char tag[AEAD_TAG_BYTES])
{
    unsigned char none[16];
    int outl = 0;
    if (!a->seal || EVP_CipherFinal_ex(a->ctx, none, &outl) != 1 ||
        EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_GET_TAG, AEAD_TAG_BYTES, tag) != 1)
        return -1;
    return 0;
}

int aead_open_end(struct aead *a, const unsigned char tag[AEAD_TAG_BYTES])
{
    unsigned char none[16], t[AEAD_TAG_BYTES];
    int outl = 0;
    memcpy(t, tag, sizeof t); /* the ctrl takes a non-const pointer */
    if (a->seal || EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_SET_TAG, AEAD_TAG_BYTES, t) != 1)
        return -1;
    return EVP_CipherFinal_ex(a->ctx, none, &outl) == 1 ? 0 : -1;
}

int aead_hkdf_sha256(const void *ikm, size_t ikm_len, const void *salt, size_t salt_len,
                     const void *info, size_t info_len, void *out, size_t out_len)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
    int rc = -1;
    if (!kctx || !ikm_len)
        goto out;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_len),
        OSSL_PARAM_construct_end()};
    if (EVP_KDF_derive(kctx, out, out_len, params) == 1)
        rc = 0;
out:
    EVP_KDF_CTX_free(kctx);
    EVP_KDF_free(kdf);
    return rc;
}

const char *aead_name(void)
{
    return "AES-256-GCM";
}
