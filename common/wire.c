/* wire.c - peer frame headers and the handshake MAC (layout in wire.h). */
#include "wire.h"

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
#define OFF_RESERVED 64
#define OFF_HCRC 68

size_t wire_dtype_size(unsigned dtype)
{
    switch (dtype) {
    case WIRE_BYTES: return 1;
    case WIRE_F32: return 4;
    case WIRE_BF16: return 2;
    case WIRE_F16: return 2;
    case WIRE_I32: return 4;
    }
    return 0;
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
    uint32_t magic, hcrc, reserved;
    uint16_t version;

    GET(OFF_MAGIC, magic);
    if (magic != WIRE_MAGIC)
        return why_set(why, why_len, "not a shoal frame (bad magic)");
    GET(OFF_VERSION, version);
    if (version != WIRE_VERSION)
        return why_set(why, why_len, "unsupported frame version");
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
    GET(OFF_RESERVED, reserved);
    if (f->kind < 1 || f->kind > WIRE_KIND_MAX)
        return why_set(why, why_len, "unknown frame kind");
    if (f->dtype > WIRE_DTYPE_MAX)
        return why_set(why, why_len, "unknown dtype");
    if (f->ndim > WIRE_MAX_DIMS)
        return why_set(why, why_len, "more than 4 dimensions");
    if (reserved)
        return why_set(why, why_len, "reserved header bytes are not zero");
    if (f->payload_len > payload_max)
        return why_set(why, why_len, "payload larger than the limit");
    for (int i = 0; i < WIRE_MAX_DIMS; i++) {
        GET(OFF_SHAPE + 4 * i, f->shape[i]);
        if (i >= f->ndim && f->shape[i])
            return why_set(why, why_len, "shape beyond ndim is not zero");
    }
    if (f->dtype != WIRE_BYTES) {
        /* every factor is < 2^32 and the running product stays <= payload_max */
        uint64_t bytes = wire_dtype_size(f->dtype);
        for (int i = 0; i < f->ndim; i++) {
            if (f->shape[i] && bytes > payload_max / f->shape[i])
                return why_set(why, why_len, "shape larger than the limit");
            bytes *= f->shape[i];
        }
        if (bytes != f->payload_len)
            return why_set(why, why_len, "payload length does not match dtype and shape");
    }
    return 0;
}

void wire_hello_mac(const void *secret, size_t secret_len,
                    const unsigned char nonce[WIRE_NONCE_BYTES], int64_t job_id,
                    uint32_t epoch, const char *role, unsigned char mac[WIRE_MAC_BYTES])
{
    static const char label[] = "shoal-hello-v1";
    unsigned char msg[sizeof label - 1 + WIRE_NONCE_BYTES + 8 + 4 + 128];
    size_t n = 0, role_len = strnlen(role, 128);
    unsigned int mac_len = WIRE_MAC_BYTES;

    memcpy(msg + n, label, sizeof label - 1), n += sizeof label - 1;
    memcpy(msg + n, nonce, WIRE_NONCE_BYTES), n += WIRE_NONCE_BYTES;
    memcpy(msg + n, &job_id, 8), n += 8;
    memcpy(msg + n, &epoch, 4), n += 4;
    memcpy(msg + n, role, role_len), n += role_len;
    HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, mac, &mac_len);
}

int wire_mac_equal(const unsigned char a[WIRE_MAC_BYTES], const unsigned char b[WIRE_MAC_BYTES])
{
    return CRYPTO_memcmp(a, b, WIRE_MAC_BYTES) == 0;
}
