/* wire.c - peer frame headers, the handshake's payloads and MAC, session
 * keys and sealed frame headers (layout in wire.h). */
#include "wire.h"

#include "aead.h"
#include "crc32c.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire format is little-endian and so is every host shoal supports"
#endif

#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_KIND 6
#define OFF_JOB 8
#define OFF_EPOCH 16
#define OFF_MB 20
#define OFF_STEP 24
#define OFF_DTYPE 32
#define OFF_NDIM 34
#define OFF_SHAPE 36
#define OFF_PLEN 52
#define OFF_PCRC 60
#define OFF_FLAGS 64
#define OFF_HCRC 68

size_t wire_dtype_size(unsigned dtype)
{
    switch (dtype) {
    case WIRE_BYTES: return 1;
    case WIRE_F32: return 4;
    case WIRE_BF16: return 2;
    case WIRE_F16: return 2;
    case WIRE_I32: return 4;
    case WIRE_Q8: return 1;
    }
    return 0;
}

uint64_t wire_payload_bytes(unsigned dtype, unsigned ndim, const uint32_t *shape, uint64_t max)
{
    /* every factor is < 2^32 and the running product stays <= max */
    uint64_t bytes = wire_dtype_size(dtype), rows = 1;
    if (bytes == 0 || ndim > WIRE_MAX_DIMS || (dtype == WIRE_Q8 && ndim == 0))
        return UINT64_MAX;
    for (unsigned i = 0; i < ndim; i++) {
        if (shape[i] && bytes > max / shape[i])
            return UINT64_MAX;
        bytes *= shape[i];
        if (i + 1 < ndim)
            rows *= shape[i];   /* <= bytes */
    }
    if (dtype == WIRE_Q8) {   /* a f32 scale per row */
        if (rows > (max - bytes) / 4)
            return UINT64_MAX;
        bytes += 4 * rows;
    }
    return bytes;
}

#define PUT(off, v) do { __typeof__(v) put_v_ = (v); memcpy(out + (off), &put_v_, sizeof put_v_); } while (0)
#define GET(off, v) memcpy(&(v), in + (off), sizeof(v))

void wire_header_encode(const struct wire_frame *f, unsigned char out[WIRE_HEADER_BYTES])
{
    memset(out, 0, WIRE_HEADER_BYTES);
    PUT(OFF_MAGIC, (uint32_t)WIRE_MAGIC);
    PUT(OFF_VERSION, (uint16_t)WIRE_VERSION);
    PUT(OFF_KIND, f->kind);
    PUT(OFF_JOB, f->job_id);
    PUT(OFF_EPOCH, f->epoch);
    PUT(OFF_MB, f->micro_batch);
    PUT(OFF_STEP, f->step);
    PUT(OFF_DTYPE, f->dtype);
    PUT(OFF_NDIM, f->ndim);
    for (int i = 0; i < WIRE_MAX_DIMS; i++)
        PUT(OFF_SHAPE + 4 * i, i < f->ndim ? f->shape[i] : 0u);
    PUT(OFF_PLEN, f->payload_len);
    PUT(OFF_PCRC, f->payload_crc);
    PUT(OFF_FLAGS, f->flags);
    PUT(OFF_HCRC, crc32c(0, out, OFF_HCRC));
}

static int why_set(char *why, size_t why_len, const char *msg)
{
    if (why && why_len)
        snprintf(why, why_len, "%s", msg);
    return -1;
}

int wire_header_decode(const unsigned char in[WIRE_HEADER_BYTES], uint64_t payload_max,
                       struct wire_frame *f, char *why, size_t why_len)
{
    uint32_t magic, hcrc;
    uint16_t version;

    GET(OFF_MAGIC, magic);
    if (magic != WIRE_MAGIC)
        return why_set(why, why_len, "not a shoal frame (bad magic)");
    GET(OFF_VERSION, version);
    if (version != WIRE_VERSION) {
        if (why && why_len)
            snprintf(why, why_len, "unsupported frame version: the peer speaks wire version %u, this agent %d; "
                     "run the same shoal release on every agent of a job", version, WIRE_VERSION);
        return -1;
    }
    GET(OFF_HCRC, hcrc);
    if (hcrc != crc32c(0, in, OFF_HCRC))
        return why_set(why, why_len, "frame header CRC mismatch");
    memset(f, 0, sizeof *f);
    GET(OFF_KIND, f->kind);
    GET(OFF_JOB, f->job_id);
    GET(OFF_EPOCH, f->epoch);
    GET(OFF_MB, f->micro_batch);
    GET(OFF_STEP, f->step);
    GET(OFF_DTYPE, f->dtype);
    GET(OFF_NDIM, f->ndim);
    GET(OFF_PLEN, f->payload_len);
    GET(OFF_PCRC, f->payload_crc);
    GET(OFF_FLAGS, f->flags);
    if (f->kind < 1 || f->kind > WIRE_KIND_MAX)
        return why_set(why, why_len, "unknown frame kind");
    if (f->dtype > WIRE_DTYPE_MAX)
        return why_set(why, why_len, "unknown dtype");
    if (f->ndim > WIRE_MAX_DIMS)
        return why_set(why, why_len, "more than 4 dimensions");
    if (f->flags & ~WIRE_FLAG_SEALED)
        return why_set(why, why_len, "unknown header flags");
    if (f->payload_len > payload_max)
        return why_set(why, why_len, "payload larger than the limit");
    for (int i = 0; i < WIRE_MAX_DIMS; i++) {
        GET(OFF_SHAPE + 4 * i, f->shape[i]);
        if (i >= f->ndim && f->shape[i])
            return why_set(why, why_len, "shape beyond ndim is not zero");
    }
    if (f->dtype == WIRE_Q8 && f->ndim == 0)
        return why_set(why, why_len, "an int8 frame needs a shape (rows of values)");
    if (f->dtype != WIRE_BYTES) {
        uint64_t bytes = wire_payload_bytes(f->dtype, f->ndim, f->shape, payload_max);
        if (bytes == UINT64_MAX)
            return why_set(why, why_len, "shape larger than the limit");
        if (bytes != f->payload_len)
            return why_set(why, why_len, "payload length does not match dtype and shape");
    }
    return 0;
}

int wire_role_ok(const void *p, size_t n)
{
    const unsigned char *s = p;
    if (n < 1 || n > WIRE_ROLE_MAX - 1)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] >= 0x7f)
            return 0;
    return 1;
}

void wire_role(int stage, int replica, int64_t node, char out[WIRE_ROLE_MAX])
{
    snprintf(out, WIRE_ROLE_MAX, "stage=%d replica=%d node=%lld", stage, replica, (long long)node);
}

static size_t put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return (size_t)bytes;
}

void wire_link_key(const void *secret, size_t secret_len, int64_t job_id, uint32_t epoch,
                   const char *role_a, const char *role_b, unsigned char key[WIRE_KEY_BYTES])
{
    static const char label[] = "shoal-link-v1";
    unsigned char msg[sizeof label - 1 + 8 + 4 + 2 * WIRE_ROLE_MAX];
    const char *lo = strcmp(role_a, role_b) <= 0 ? role_a : role_b, *hi = lo == role_a ? role_b : role_a;
    size_t n = 0, lo_len = strnlen(lo, WIRE_ROLE_MAX - 1), hi_len = strnlen(hi, WIRE_ROLE_MAX - 1);
    unsigned int key_len = WIRE_KEY_BYTES;

    memcpy(msg + n, label, sizeof label - 1), n += sizeof label - 1;
    n += put_le(msg + n, (uint64_t)job_id, 8);
    n += put_le(msg + n, epoch, 4);
    memcpy(msg + n, lo, lo_len), n += lo_len;
    msg[n++] = '\0';
    memcpy(msg + n, hi, hi_len), n += hi_len;
    HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, key, &key_len);
    OPENSSL_cleanse(msg, sizeof msg);
}

void wire_relay_token(const void *link_key, size_t key_len, int64_t job_id, uint32_t epoch, unsigned channel,
                      const char *dialer_role, const char *listener_role, unsigned char token[WIRE_MAC_BYTES])
{
    static const char label[] = "shoal-relay-v1";
    unsigned char msg[sizeof label - 1 + 8 + 4 + 1 + 2 * WIRE_ROLE_MAX];
    size_t n = 0, d_len = strnlen(dialer_role, WIRE_ROLE_MAX - 1), l_len = strnlen(listener_role, WIRE_ROLE_MAX - 1);
    unsigned int token_len = WIRE_MAC_BYTES;

    memcpy(msg + n, label, sizeof label - 1), n += sizeof label - 1;
    n += put_le(msg + n, (uint64_t)job_id, 8);
    n += put_le(msg + n, epoch, 4);
    msg[n++] = (unsigned char)channel;
    memcpy(msg + n, dialer_role, d_len), n += d_len;
    msg[n++] = '\0';
    memcpy(msg + n, listener_role, l_len), n += l_len;
    HMAC(EVP_sha256(), link_key, (int)key_len, msg, n, token, &token_len);
}

void wire_hello_mac(const void *secret, size_t secret_len,
                    const unsigned char nonce[WIRE_NONCE_BYTES], int64_t job_id,
                    uint32_t epoch, unsigned flags, const char *role,
                    unsigned char mac[WIRE_MAC_BYTES])
{
    static const char label[] = "shoal-hello-v2";
    unsigned char msg[sizeof label - 1 + WIRE_NONCE_BYTES + 8 + 4 + 1 + WIRE_ROLE_MAX];
    size_t n = 0, role_len = strnlen(role, WIRE_ROLE_MAX);
    unsigned int mac_len = WIRE_MAC_BYTES;

    memcpy(msg + n, label, sizeof label - 1), n += sizeof label - 1;
    memcpy(msg + n, nonce, WIRE_NONCE_BYTES), n += WIRE_NONCE_BYTES;
    memcpy(msg + n, &job_id, 8), n += 8;
    memcpy(msg + n, &epoch, 4), n += 4;
    msg[n++] = (unsigned char)flags;
    memcpy(msg + n, role, role_len), n += role_len;
    HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, mac, &mac_len);
}

int wire_mac_equal(const unsigned char a[WIRE_MAC_BYTES], const unsigned char b[WIRE_MAC_BYTES])
{
    return CRYPTO_memcmp(a, b, WIRE_MAC_BYTES) == 0;
}

size_t wire_hello_encode(const struct wire_hello *h, int with_nonce,
                         unsigned char out[WIRE_HELLO_MAX])
{
    size_t n = 0, role_len = strnlen(h->role, WIRE_ROLE_MAX - 1);
    memcpy(out + n, h->mac, WIRE_MAC_BYTES), n += WIRE_MAC_BYTES;
    if (with_nonce)
        memcpy(out + n, h->nonce, WIRE_NONCE_BYTES), n += WIRE_NONCE_BYTES;
    out[n++] = (unsigned char)h->flags;
    memcpy(out + n, h->role, role_len), n += role_len;
    return n;
}

int wire_hello_decode(const void *in, size_t n, int with_nonce, struct wire_hello *h, char *why,
                      size_t why_len)
{
    const unsigned char *p = in;
    size_t fixed = WIRE_MAC_BYTES + (with_nonce ? WIRE_NONCE_BYTES : 0) + 1;
    if (n <= fixed || n > fixed + WIRE_ROLE_MAX - 1)
        return why_set(why, why_len, "hello of the wrong length");
    memset(h, 0, sizeof *h);
    memcpy(h->mac, p, WIRE_MAC_BYTES), p += WIRE_MAC_BYTES;
    if (with_nonce)
        memcpy(h->nonce, p, WIRE_NONCE_BYTES), p += WIRE_NONCE_BYTES;
    h->flags = *p++;
    unsigned known = WIRE_HELLO_ENCRYPT | (with_nonce ? WIRE_HELLO_CHANNEL(3) : 0);
    if ((h->flags & ~known) || WIRE_HELLO_CHANNEL_OF(h->flags) >= WIRE_CHANNELS)
        return why_set(why, why_len, "unknown hello flags");
    if (!wire_role_ok(p, n - fixed))
        return why_set(why, why_len, "malformed role in hello");
    memcpy(h->role, p, n - fixed);
    h->role[n - fixed] = '\0';
    return 0;
}

int wire_session_keys(const void *secret, size_t secret_len,
                      const unsigned char lnonce[WIRE_NONCE_BYTES],
                      const unsigned char dnonce[WIRE_NONCE_BYTES], int64_t job_id,
                      uint32_t epoch, const char *dialer_role, const char *listener_role,
                      unsigned char d2l[WIRE_KEY_BYTES], unsigned char l2d[WIRE_KEY_BYTES])
{
    static const char label[] = "shoal-peer-keys-v2";
    unsigned char salt[2 * WIRE_NONCE_BYTES], keys[2 * WIRE_KEY_BYTES];
    unsigned char info[sizeof label - 1 + 8 + 4 + 2 * WIRE_ROLE_MAX];
    size_t n = 0, dlen = strnlen(dialer_role, WIRE_ROLE_MAX - 1),
           llen = strnlen(listener_role, WIRE_ROLE_MAX - 1);
    int rc;

    memcpy(salt, lnonce, WIRE_NONCE_BYTES);
    memcpy(salt + WIRE_NONCE_BYTES, dnonce, WIRE_NONCE_BYTES);
    memcpy(info + n, label, sizeof label - 1), n += sizeof label - 1;
    memcpy(info + n, &job_id, 8), n += 8;
    memcpy(info + n, &epoch, 4), n += 4;
    memcpy(info + n, dialer_role, dlen), n += dlen;
    info[n++] = '\0';
    memcpy(info + n, listener_role, llen), n += llen;
    rc = aead_hkdf_sha256(secret, secret_len, salt, sizeof salt, info, n, keys, sizeof keys);
    if (rc == 0) {
        memcpy(d2l, keys, WIRE_KEY_BYTES);
        memcpy(l2d, keys + WIRE_KEY_BYTES, WIRE_KEY_BYTES);
    }
    OPENSSL_cleanse(keys, sizeof keys);
    return rc;
}

int wire_seal_begin(struct aead *tx, uint64_t counter, struct wire_frame *f,
                    unsigned char out[WIRE_SEALED_HEADER_BYTES])
{
    f->flags = WIRE_FLAG_SEALED;
    f->payload_crc = 0;
    wire_header_encode(f, out);
    if (aead_begin(tx, counter, 0, out, WIRE_HEADER_BYTES) != 0 ||
        aead_seal_end(tx, out + WIRE_HEADER_BYTES) != 0)
        return -1;
    if (f->payload_len && aead_begin(tx, counter, 1, out, WIRE_HEADER_BYTES) != 0)
        return -1;
    return 0;
}

int wire_open_begin(struct aead *rx, uint64_t counter,
                    const unsigned char in[WIRE_SEALED_HEADER_BYTES], uint64_t payload_max,
                    struct wire_frame *f, char *why, size_t why_len)
{
    if (aead_begin(rx, counter, 0, in, WIRE_HEADER_BYTES) != 0 ||
        aead_open_end(rx, in + WIRE_HEADER_BYTES) != 0) {
        why_set(why, why_len, "frame header failed authentication");
        return WIRE_AUTH_FAILED;
    }
    if (wire_header_decode(in, payload_max, f, why, why_len) != 0)
        return -1;
    if (!(f->flags & WIRE_FLAG_SEALED))
        return why_set(why, why_len, "authentic header not marked sealed");
    if (f->payload_len && aead_begin(rx, counter, 1, in, WIRE_HEADER_BYTES) != 0)
        return why_set(why, why_len, "cannot begin the payload's decryption");
    return 0;
}
