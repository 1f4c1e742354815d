/* make_peer_seeds.c - writes the seed corpus of fuzz_peer: real frame
 * headers, real hello payloads with real MACs, and real frames as the
 * engine writes them (peer_send on a socketpair, read back raw), plain and
 * sealed under fuzz_peer.c's fixed keys, each behind the mode byte that
 * fuzz_peer.c reads first.
 *
 *   build (from the repository root):
 *     cc -std=c11 -D_GNU_SOURCE -pthread -o /tmp/make_peer_seeds \
 *        tests/fuzz/seeds/make_peer_seeds.c agent/net/peer.c agent/net/peer_dial.c agent/net/peer_seal.c \
 *        agent/net/peer_listener.c agent/net/peer_stream.c common/aead.c common/codec.c common/crc32c.c \
 *        common/err.c common/hostport.c common/log.c common/wire.c -lcrypto -lm
 *     /tmp/make_peer_seeds tests/fuzz/corpus/fuzz_peer
 *
 * The job, link key, nonces and roles are fuzz_peer.c's: keep them equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../../agent/net/peer.h"
#include "../../../agent/net/peer_internal.h"
#include "../../../common/codec.h"
#include "../../../common/log.h"

#define FUZZ_JOB 7
#define FUZZ_EPOCH 3
#define FUZZ_KEY "fuzz peer secret" /* the link's key */
#define FUZZ_DIALER "stage=0 replica=0"
#define FUZZ_LISTENER "stage=1 replica=0"

static const char *dir;

static int put(const char *name, unsigned mode, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned char m = (unsigned char)mode;
    int rc = f && fwrite(&m, 1, 1, f) == 1 && fwrite(p, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "make_peer_seeds: cannot write %s\n", path);
    return rc;
}

/* fuzz_peer.c's conn_pair. */
static void conn_pair(int sealed, struct peer_conn *tx, struct peer_conn *rx)
{
    unsigned char ln[WIRE_NONCE_BYTES], dn[WIRE_NONCE_BYTES];
    struct peer_auth a = {.job_id = FUZZ_JOB, .epoch = FUZZ_EPOCH, .role = FUZZ_LISTENER};
    struct shoal_err err;
    int sv[2];
    peer_auth_link(&a, FUZZ_DIALER, FUZZ_KEY, sizeof FUZZ_KEY - 1);
    memset(ln, 0x11, sizeof ln);
    memset(dn, 0x22, sizeof dn);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        exit(1);
    *tx = (struct peer_conn){.fd = sv[0], .addr = "seed", .job_id = FUZZ_JOB, .epoch = FUZZ_EPOCH};
    *rx = (struct peer_conn){.fd = sv[1], .addr = "seed", .job_id = FUZZ_JOB, .epoch = FUZZ_EPOCH};
    if (sealed && (peer_seal_start(tx, &a, &a.links[0], ln, dn, FUZZ_DIALER, FUZZ_LISTENER, 1, &err) != 0 ||
                   peer_seal_start(rx, &a, &a.links[0], ln, dn, FUZZ_DIALER, FUZZ_LISTENER, 0, &err) != 0)) {
        fprintf(stderr, "make_peer_seeds: %s\n", err.message);
        exit(1);
    }
}

/* Frames of a short exchange as the engine writes them, raw. */
static int engine_frames(const char *name, int sealed)
{
    struct peer_conn tx, rx;
    struct shoal_err err;
    static unsigned char wire[16384];
    float act[2 * 4 * 8];
    unsigned char q8[2 * 4 * (8 + 4)];   /* int8 rows of 8, a scale each */
    double norm = 2.5;
    const char reason[] = "stage 1 failed";
    conn_pair(sealed, &tx, &rx);
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++)
        act[i] = (float)i * 0.25f;
    codec_encode(CODEC_INT8, act, sizeof act / sizeof act[0], 8, q8, NULL);
    struct wire_frame frames[] = {
        {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = 1, .micro_batch = 0, .ndim = 3,
         .shape = {2, 4, 8}, .payload_len = sizeof act},
        {.kind = WIRE_GRAD_NORM, .dtype = WIRE_BYTES, .step = 1, .payload_len = sizeof norm},
        {.kind = WIRE_ALLREDUCE, .dtype = WIRE_F32, .step = 1, .micro_batch = 65536, .ndim = 1,
         .shape = {0}, .payload_len = 0},
        {.kind = WIRE_ERROR, .dtype = WIRE_BYTES, .payload_len = sizeof reason - 1},
        {.kind = WIRE_EVAL, .dtype = WIRE_Q8, .step = 1, .micro_batch = 0, .ndim = 3,
         .shape = {2, 4, 8}, .payload_len = sizeof q8},
        {.kind = WIRE_ALLREDUCE, .dtype = WIRE_BF16, .step = 1, .micro_batch = 1, .ndim = 1,
         .shape = {16}, .payload_len = 32},
    };
    const void *payloads[] = {act, &norm, NULL, reason, q8, act};
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++)
        if (peer_send(&tx, &frames[i], payloads[i], 1000, &err) != 0) {
            fprintf(stderr, "make_peer_seeds: %s\n", err.message);
            return -1;
        }
    ssize_t n = read(rx.fd, wire, sizeof wire);
    peer_close(&tx);
    peer_close(&rx);
    if (n <= 0)
        return -1;
    if (sealed)
        return put(name, 3, wire, (size_t)n);
    char fixed[64];
    snprintf(fixed, sizeof fixed, "%s-crcs-fixed", name);
    return put(name, 4, wire, (size_t)n) || put(fixed, 7, wire, (size_t)n) ? -1 : 0;
}

static int hellos(void)
{
    unsigned char buf[WIRE_HELLO_MAX], nonce[WIRE_NONCE_BYTES];
    struct wire_hello h = {.role = FUZZ_DIALER};
    int rc = 0;
    memset(nonce, 0x33, sizeof nonce);
    memset(h.nonce, 0x22, sizeof h.nonce);
    for (unsigned flags = 0; flags <= WIRE_HELLO_ENCRYPT; flags++) {
        h.flags = flags;
        wire_hello_mac(FUZZ_KEY, sizeof FUZZ_KEY - 1, nonce, FUZZ_JOB, FUZZ_EPOCH, flags,
                       h.role, h.mac);
        size_t n = wire_hello_encode(&h, 1, buf);
        rc |= put(flags ? "hello-dialer-encrypt" : "hello-dialer", 1, buf, n);
    }
    snprintf(h.role, sizeof h.role, "%s", FUZZ_LISTENER);
    h.flags = WIRE_HELLO_ENCRYPT;
    wire_hello_mac(FUZZ_KEY, sizeof FUZZ_KEY - 1, nonce, FUZZ_JOB, FUZZ_EPOCH, h.flags,
                   h.role, h.mac);
    rc |= put("hello-answer", 2, buf, wire_hello_encode(&h, 0, buf));
    return rc;
}

static int headers(void)
{
    unsigned char h[WIRE_HEADER_BYTES];
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .job_id = FUZZ_JOB,
                           .epoch = FUZZ_EPOCH, .step = 12, .micro_batch = 3, .ndim = 3,
                           .shape = {2, 16, 64}, .payload_len = 2 * 16 * 64 * 4,
                           .payload_crc = 0x12345678};
    int rc = 0;
    wire_header_encode(&f, h);
    rc |= put("header-activation", 0, h, sizeof h);
    f.dtype = WIRE_Q8;
    f.payload_len = 2 * 16 * (64 + 4);
    wire_header_encode(&f, h);
    rc |= put("header-activation-int8", 0, h, sizeof h);
    f = (struct wire_frame){.kind = WIRE_GRAD_NORM, .dtype = WIRE_BYTES, .job_id = FUZZ_JOB,
                            .epoch = FUZZ_EPOCH, .payload_len = 8, .flags = WIRE_FLAG_SEALED};
    wire_header_encode(&f, h);
    rc |= put("header-sealed", 0, h, sizeof h);
    return rc;
}

/* fuzz_peer.c's struct alteration: at(4) xor(1) shift(1) kind(1) step(8), payload. */
static int alterations(void)
{
    unsigned char in[15 + 40];
    int rc = 0;
    memset(in, 0, sizeof in);
    in[6] = WIRE_ACTIVATION - 1;
    in[7] = 9;
    for (size_t i = 15; i < sizeof in; i++)
        in[i] = (unsigned char)i;
    rc |= put("seal-open-clean", 5, in, sizeof in);
    rc |= put("engine-seal-clean", 6, in, sizeof in);
    in[0] = 100; /* a payload byte */
    in[4] = 0x40;
    rc |= put("seal-open-altered", 5, in, sizeof in);
    rc |= put("engine-seal-altered", 6, in, sizeof in);
    in[4] = 0;
    in[5] = 1; /* the next frame number */
    rc |= put("engine-seal-replayed", 6, in, 15);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_peer_seeds DIR\n");
        return 2;
    }
    dir = argv[1];
    log_threshold = LOG_LEVEL_ERROR;
    return headers() || hellos() || engine_frames("wire-sealed", 1) ||
           engine_frames("wire-plain", 0) || alterations() ? 1 : 0;
}
