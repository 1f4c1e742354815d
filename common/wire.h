/* wire.h - the peer wire format: fixed 72-byte little-endian frame headers,
 * the hello handshake's payloads and MAC, and sealed (encrypted) frames.
 * No sockets here (see the agent's peer code); every parser below is a pure
 * function over bytes (tests/fuzz/fuzz_peer.c feeds them garbage).
 *
 * Header layout (byte offsets):
 *    0 u32 magic "SHLF"      4 u16 version (4)      6 u16 kind
 *    8 i64 job id           16 u32 plan epoch      20 u32 micro-batch
 *   24 u64 step             32 u16 dtype           34 u16 ndim (0..4)
 *   36 u32 shape[4]         52 u64 payload bytes   60 u32 payload CRC32C
 *   64 u32 flags            68 u32 CRC32C of bytes 0..67
 * For tensor dtypes the payload length must be what the dtype makes of the
 * shape (wire_payload_bytes: the product of the shape times the element
 * size; for WIRE_Q8 also a 4-byte scale per row of shape[ndim-1] values,
 * common/codec.h); a header is checked completely before a single payload
 * byte is read or trusted.  Flags: WIRE_FLAG_SEALED or 0.
 *
 * Handshake (version 2): the listener greets with a HELLO whose payload is a
 * fresh 32-byte nonce; the dialer answers with a HELLO (its job and epoch)
 *     mac(32) | dialer nonce(32) | flags(1) | dialer role
 * mac = wire_hello_mac(link key, listener nonce, job, epoch, flags, role),
 * flags WIRE_HELLO_ENCRYPT when the dialer asks for encryption, and the
 * connection's channel (WIRE_HELLO_CHANNEL: which of the pair's
 * connections this is, so two tasklets may hold several, dialled either
 * way); the listener answers with a HELLO
 *     mac(32) | flags(1) | listener role
 * mac = wire_hello_mac(link key, dialer nonce, job, epoch, flags, role), flags
 * WIRE_HELLO_ENCRYPT when the connection will be sealed (either end asked).
 * Both choices are under the MACs: a man in the middle who clears one fails
 * the handshake, and a dialer that asked refuses an answer without it.
 *
 * Sealed connections: after the handshake every frame each way is sealed
 * with AES-256-GCM under that direction's session key (wire_session_keys:
 * HKDF-SHA256 of the link key, salted with both nonces).  The link key
 * (wire_link_key) is the job secret's for that pair of roles alone.  Frame n of a
 * direction (n = 0, 1, ... counted by both ends, never sent) travels as
 *     header(72, flags SEALED, payload CRC 0) | header tag(16)
 *     [ | payload ciphertext(payload bytes) | payload tag(16) ]  (payload > 0)
 * The header tag is the GCM tag of an empty message with nonce (n, 0) and
 * the header as associated data, so a header is authentic before a payload
 * byte is read; the payload is encrypted with nonce (n, 1) and the header as
 * associated data.  A replayed, reordered, dropped or altered frame fails
 * its tag.  The tag replaces the payload CRC. */
#ifndef SHOAL_WIRE_H
#define SHOAL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_MAGIC 0x464c4853u /* "SHLF" as little-endian bytes */
/* 2: header flags, hello flags, sealed frames.  3: the WIRE_Q8 dtype,
 * bf16 and int8 tensors on stage links and in all-reduce chunks, WIRE_EVAL
 * frames.  4: a role names the node too ("stage=S replica=R node=N"), so
 * a connection proves which node it comes from.  5: WIRE_STATE frames (a
 * live resume).  6: WIRE_LOSS frames.  7: every link of a job has a key of
 * its own (wire_link_key), given only to its two ends; the job secret
 * stays on the server.  8: a dialer's hello names its channel, so a
 * connection may be dialled from either end, or through a relay.  Agents
 * of different
 * versions cannot talk: the first frame
 * (the listener's hello) fails with "peer speaks wire version N, this
 * agent V", so upgrade every agent of a job together. */
#define WIRE_VERSION 8
#define WIRE_HEADER_BYTES 72
#define WIRE_MAX_DIMS 4
#define WIRE_NONCE_BYTES 32
#define WIRE_MAC_BYTES 32
#define WIRE_ROLE_MAX 48       /* bytes of a role, with the terminating NUL */
#define WIRE_TAG_BYTES 16
#define WIRE_KEY_BYTES 32
#define WIRE_SEALED_HEADER_BYTES (WIRE_HEADER_BYTES + WIRE_TAG_BYTES)
/* Bytes a sealed frame adds: the header tag, and the payload tag when it
 * has a payload. */
#define WIRE_SEAL_OVERHEAD(payload_len) (WIRE_TAG_BYTES + ((payload_len) ? WIRE_TAG_BYTES : 0))

#define WIRE_FLAG_SEALED 1u    /* header flags: the frame is sealed */
#define WIRE_HELLO_ENCRYPT 1u  /* hello flags: asks for / grants a sealed connection */
/* A dialer's hello flags carry the connection's channel in bits 1..2: a
 * pair of tasklets holds at most one connection of each, whoever dialled
 * it.  A listener parks and hands out connections by (role, channel). */
enum wire_channel {
    WIRE_CHANNEL_STAGE = 0,      /* the pipeline link between neighbouring stages */
    WIRE_CHANNEL_SENDS = 1,      /* a ring edge (or the tied head's) on which the dialer sends */
    WIRE_CHANNEL_RECEIVES = 2,   /* one on which the dialer receives: dialled by the receiver */
    WIRE_CHANNELS
};
#define WIRE_HELLO_CHANNEL(c) ((unsigned)(c) << 1)
#define WIRE_HELLO_CHANNEL_OF(flags) (((flags) >> 1) & 3u)
/* The largest hello payload: the dialer's with the longest role. */
#define WIRE_HELLO_MAX (WIRE_MAC_BYTES + WIRE_NONCE_BYTES + 1 + WIRE_ROLE_MAX - 1)
#define WIRE_AUTH_FAILED (-2)  /* wire_open_begin: the tag does not verify */

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
    WIRE_EVAL = 10,           /* forward: residual stream of a validation micro-batch (no backward) */
    WIRE_STATE = 11,          /* a piece of a stage's state (a stage file) sent round the ring (ring.h) */
    WIRE_LOSS = 12,           /* payload: one little-endian double, the sender's mean loss of the step (ring.h) */
    WIRE_KIND_MAX = 12
};

enum wire_dtype {
    WIRE_BYTES = 0, /* opaque; shape unused */
    WIRE_F32 = 1,
    WIRE_BF16 = 2,
    WIRE_F16 = 3,
    WIRE_I32 = 4,
    WIRE_Q8 = 5,    /* int8 rows of shape[ndim-1] values, a f32 scale each (common/codec.h) */
    WIRE_DTYPE_MAX = 5
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
    uint32_t payload_crc; /* CRC32C of the payload; 0 in sealed frames */
    uint32_t flags;       /* WIRE_FLAG_*; the peer code sets it */
};

/* Bytes per element of a dtype; 1 for WIRE_BYTES, 0 for an unknown one. */
size_t wire_dtype_size(unsigned dtype);

/* The payload bytes a tensor frame of `dtype` and shape[0..ndim) carries,
 * or UINT64_MAX when that is over `max` (or no such tensor: WIRE_Q8 of no
 * dimension).  WIRE_BYTES frames have no rule: their length is their own. */
uint64_t wire_payload_bytes(unsigned dtype, unsigned ndim, const uint32_t *shape, uint64_t max);

/* Writes the header of f (payload_crc and flags as given) into out. */
void wire_header_encode(const struct wire_frame *f, unsigned char out[WIRE_HEADER_BYTES]);

/* Parses and checks a header: magic, version, header CRC, kind, dtype, ndim,
 * flags, payload length <= payload_max and consistent with the shape.
 * Returns 0, or -1 with the reason in why (f unspecified). */
int wire_header_decode(const unsigned char in[WIRE_HEADER_BYTES], uint64_t payload_max,
                       struct wire_frame *f, char *why, size_t why_len);

/* 1 when p[0..n) is a valid role: 1..WIRE_ROLE_MAX-1 printable ASCII bytes. */
int wire_role_ok(const void *p, size_t n);

/* A tasklet's role as hellos name it: "stage=S replica=R node=N". */
void wire_role(int stage, int replica, int64_t node, char out[WIRE_ROLE_MAX]);

/* The key of the link between two tasklets of a job, which their hellos
 * and session keys use in place of the job secret: HMAC-SHA256(job secret,
 * "shoal-link-v1" | job id(8, little-endian) | epoch(4, little-endian) |
 * the lesser role | NUL | the greater role), the roles compared as bytes,
 * so both ends get the same key.  The server derives it and hands it only
 * to the link's two ends: a member of the job cannot pose as another
 * member to a third, whose link key it never saw. */
void wire_link_key(const void *secret, size_t secret_len, int64_t job_id, uint32_t epoch,
                   const char *role_a, const char *role_b, unsigned char key[WIRE_KEY_BYTES]);

/* The token two ends of a relayed connection give shoal-relay to be paired
 * (relay_proto.h): HMAC-SHA256(link key, "shoal-relay-v1" | job id(8) |
 * epoch(4) | channel(1) | dialer role | NUL | listener role).  Only the
 * link's ends can make it; it tells the relay nothing of the key. */
void wire_relay_token(const void *link_key, size_t key_len, int64_t job_id, uint32_t epoch, unsigned channel,
                      const char *dialer_role, const char *listener_role, unsigned char token[WIRE_MAC_BYTES]);

/* The handshake MAC described above: HMAC-SHA256(link key, "shoal-hello-v2" |
 * nonce | job id(8) | epoch(4) | flags(1) | role); role names the sender's
 * tasklet, e.g. "stage=1 replica=0". */
void wire_hello_mac(const void *secret, size_t secret_len,
                    const unsigned char nonce[WIRE_NONCE_BYTES], int64_t job_id,
                    uint32_t epoch, unsigned flags, const char *role,
                    unsigned char mac[WIRE_MAC_BYTES]);

/* 1 when the two MACs are equal, compared in constant time. */
int wire_mac_equal(const unsigned char a[WIRE_MAC_BYTES], const unsigned char b[WIRE_MAC_BYTES]);

/* A job hello's payload: the dialer's (with its nonce) or the listener's
 * answer (without). */
struct wire_hello {
    unsigned char mac[WIRE_MAC_BYTES];
    unsigned char nonce[WIRE_NONCE_BYTES]; /* the dialer's; unused in an answer */
    unsigned flags;                        /* WIRE_HELLO_ENCRYPT, | WIRE_HELLO_CHANNEL in a dialer's */
    char role[WIRE_ROLE_MAX];              /* NUL-terminated */
};

/* Writes h (role must be wire_role_ok) as a dialer's hello (with_nonce 1)
 * or a listener's answer (0) into out; returns the payload bytes. */
size_t wire_hello_encode(const struct wire_hello *h, int with_nonce,
                         unsigned char out[WIRE_HELLO_MAX]);

/* Parses a hello payload of n bytes written like wire_hello_encode: the
 * lengths, known flags only, a valid role.  Returns 0, or -1 with the
 * reason in why (h unspecified).  The MAC is the caller's to check. */
int wire_hello_decode(const void *in, size_t n, int with_nonce, struct wire_hello *h, char *why,
                      size_t why_len);

/* The session keys of a job connection whose handshake succeeded: 64 bytes
 * of HKDF-SHA256(ikm = link key, salt = listener nonce | dialer nonce,
 * info = "shoal-peer-keys-v2" | job id(8) | epoch(4) | dialer role | NUL |
 * listener role): the dialer-to-listener key, then listener-to-dialer.
 * Returns 0, or -1 when the key is empty or OpenSSL fails. */
int wire_session_keys(const void *secret, size_t secret_len,
                      const unsigned char lnonce[WIRE_NONCE_BYTES],
                      const unsigned char dnonce[WIRE_NONCE_BYTES], int64_t job_id,
                      uint32_t epoch, const char *dialer_role, const char *listener_role,
                      unsigned char d2l[WIRE_KEY_BYTES], unsigned char l2d[WIRE_KEY_BYTES]);

struct aead; /* common/aead.h */

/* Seals frame number `counter` of tx's direction: sets f->flags to
 * WIRE_FLAG_SEALED and f->payload_crc to 0, writes the header and its tag
 * into out, and (payload_len > 0) begins the payload message: the caller
 * passes the payload through aead_update and appends aead_seal_end's tag.
 * Returns 0 or -1 (OpenSSL failed). */
int wire_seal_begin(struct aead *tx, uint64_t counter, struct wire_frame *f,
                    unsigned char out[WIRE_SEALED_HEADER_BYTES]);

/* Opens the sealed header of frame number `counter` of rx's direction:
 * checks its tag first, then decodes it like wire_header_decode (and that
 * it is marked sealed), then (payload_len > 0) begins the payload message:
 * the caller passes the ciphertext through aead_update and checks the
 * payload tag with aead_open_end before trusting a byte.  Returns 0,
 * WIRE_AUTH_FAILED when the header tag does not verify, or -1 with the
 * reason in why for an authentic but bad header. */
int wire_open_begin(struct aead *rx, uint64_t counter,
                    const unsigned char in[WIRE_SEALED_HEADER_BYTES], uint64_t payload_max,
                    struct wire_frame *f, char *why, size_t why_len);

#endif
