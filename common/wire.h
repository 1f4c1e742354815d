/* wire.h - the peer wire format: fixed 72-byte little-endian frame headers
 * and the hello handshake's MAC. No sockets here (see the agent's peer code).
 *
 * Header layout (byte offsets):
 *    0 u32 magic "SHLF"      4 u16 version          6 u16 kind
 *    8 i64 job id           16 u32 plan epoch      20 u32 micro-batch
 *   24 u64 step             32 u16 dtype           34 u16 ndim (0..4)
 *   36 u32 shape[4]         52 u64 payload bytes   60 u32 payload CRC32C
 *   64 u32 reserved (0)     68 u32 CRC32C of bytes 0..67
 * For tensor dtypes the payload length must equal the product of the shape
 * times the element size; a header is checked completely before a single
 * payload byte is read or trusted.
 *
 * Handshake: the listener sends a HELLO whose payload is a fresh 32-byte
 * nonce; the dialer answers with a HELLO whose payload is
 * HMAC-SHA256(job secret, "shoal-hello-v1" | nonce | job id | epoch | role)
 * followed by its own nonce, which the listener answers the same way. A peer
 * that fails is dropped. */
#ifndef SHOAL_WIRE_H
#define SHOAL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_MAGIC 0x464c4853u /* "SHLF" as little-endian bytes */
#define WIRE_VERSION 1
#define WIRE_HEADER_BYTES 72
#define WIRE_MAX_DIMS 4
#define WIRE_NONCE_BYTES 32
#define WIRE_MAC_BYTES 32

enum wire_kind {
    WIRE_HELLO = 1,
    WIRE_ACTIVATION = 2,      /* forward: residual stream (B,T,C) */
    WIRE_ACTIVATION_GRAD = 3, /* backward: its gradient (B,T,C) */
    WIRE_ALLREDUCE = 4,       /* one chunk of a ring all-reduce */
    WIRE_PING = 5,
    WIRE_PONG = 6,
    WIRE_PROBE = 7,           /* bandwidth probe bytes */
    WIRE_ERROR = 8,           /* payload: a UTF-8 reason */
    WIRE_GRAD_NORM = 9,       /* payload: one little-endian double, a sum of squared gradients */
    WIRE_KIND_MAX = 9
};

enum wire_dtype {
    WIRE_BYTES = 0, /* opaque; shape unused */
    WIRE_F32 = 1,
    WIRE_BF16 = 2,
    WIRE_F16 = 3,
    WIRE_I32 = 4,
    WIRE_DTYPE_MAX = 4
};

struct wire_frame {
    uint16_t kind;        /* enum wire_kind */
    uint16_t dtype;       /* enum wire_dtype */
    int64_t job_id;
    uint32_t epoch;       /* plan epoch */
    uint32_t micro_batch;
    uint64_t step;
    uint16_t ndim;
    uint32_t shape[WIRE_MAX_DIMS];
    uint64_t payload_len; /* bytes */
    uint32_t payload_crc; /* CRC32C of the payload */
};

/* Bytes per element of a dtype; 1 for WIRE_BYTES, 0 for an unknown one. */
size_t wire_dtype_size(unsigned dtype);

/* Writes the header of f (payload_crc as given) into out. */
void wire_header_encode(const struct wire_frame *f, unsigned char out[WIRE_HEADER_BYTES]);

/* Parses and checks a header: magic, version, header CRC, kind, dtype, ndim,
 * reserved bytes, payload length <= payload_max and consistent with the
 * shape. Returns 0, or -1 with the reason in why (f unspecified). */
int wire_header_decode(const unsigned char in[WIRE_HEADER_BYTES], uint64_t payload_max,
                       struct wire_frame *f, char *why, size_t why_len);

/* The handshake MAC described above; role names the sender's tasklet, e.g.
 * "stage=1 replica=0". */
void wire_hello_mac(const void *secret, size_t secret_len,
                    const unsigned char nonce[WIRE_NONCE_BYTES], int64_t job_id,
                    uint32_t epoch, const char *role, unsigned char mac[WIRE_MAC_BYTES]);

/* 1 when the two MACs are equal, compared in constant time. */
int wire_mac_equal(const unsigned char a[WIRE_MAC_BYTES], const unsigned char b[WIRE_MAC_BYTES]);

#endif
