/* fuzz_peer.c - the peer wire format (common/wire.h) and the agent's frame
 * engine (agent/net/peer.c) on hostile bytes.  The first input byte picks what
 * the rest is:
 *
 *   0  a frame header: wire_header_decode, as it is and with its CRC set
 *      right (so the checks behind the CRC are reached); a header it accepts
 *      must encode back to the same 72 bytes, and announce no more than the
 *      limit;
 *   1  a dialer's hello payload, 2  a listener's answer (wire_hello_decode,
 *      as hello_job and dial_hello call it): one that parses must encode
 *      back to the same bytes; its MAC is then checked as the listener would;
 *   3  bytes arriving on an encrypted job connection: peer_recv on one end
 *      of a socketpair whose seal has fixed keys, frame after frame until it
 *      fails (the seeds are real sealed frames under those keys);
 *   4  the same on a plain connection, 7  and with every header's and
 *      payload's CRC set right first;
 *   5  seal, alter, open: a frame built from the input is sealed with the
 *      fixed key (wire_seal_begin), one byte of it xor-ed and the frame
 *      number perhaps shifted as the input says, then opened
 *      (wire_open_begin): it must open, with the same payload, exactly when
 *      nothing was changed;
 *   6  the same through the engine: the altered frame goes through the
 *      socketpair into peer_recv.
 *
 * The fixed keys come from peer_seal_start with the link key, nonces and
 * roles below (tests/fuzz/seeds/make_peer_seeds.c writes seeds with the
 * same ones). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../../agent/net/peer_internal.h"
#include "../../common/aead.h"
#include "../../common/crc32c.h"
#include "../../common/log.h"

#define FUZZ_JOB 7
#define FUZZ_EPOCH 3
#define FUZZ_KEY "fuzz peer secret" /* the link's key */
#define FUZZ_DIALER "stage=0 replica=0"
#define FUZZ_LISTENER "stage=1 replica=0"
#define PAYLOAD_CAP (64u << 10) /* bytes a receive accepts here */

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_peer: broken promise: %s\n", what);
        abort();
    }
}

static struct peer_auth fuzz_auth(void)
{
    struct peer_auth a = {.job_id = FUZZ_JOB, .epoch = FUZZ_EPOCH, .role = FUZZ_LISTENER};
    peer_auth_link(&a, FUZZ_DIALER, FUZZ_KEY, sizeof FUZZ_KEY - 1);
    return a;
}

/* A connected pair on a socketpair: *tx the dialer's end, *rx the
 * listener's, both sealed with the fixed keys when `sealed`. */
static int conn_pair(int sealed, struct peer_conn *tx, struct peer_conn *rx)
{
    unsigned char ln[WIRE_NONCE_BYTES], dn[WIRE_NONCE_BYTES];
    struct peer_auth a = fuzz_auth();
    struct shoal_err err;
    int sv[2];
    memset(ln, 0x11, sizeof ln);
    memset(dn, 0x22, sizeof dn);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    *tx = (struct peer_conn){.fd = sv[0], .addr = "fuzz-dialer", .job_id = FUZZ_JOB,
                             .epoch = FUZZ_EPOCH};
    *rx = (struct peer_conn){.fd = sv[1], .addr = "fuzz-listener", .job_id = FUZZ_JOB,
                             .epoch = FUZZ_EPOCH};
    if (sealed && (peer_seal_start(tx, &a, &a.links[0], ln, dn, FUZZ_DIALER, FUZZ_LISTENER, 1, &err) != 0 ||
                   peer_seal_start(rx, &a, &a.links[0], ln, dn, FUZZ_DIALER, FUZZ_LISTENER, 0, &err) != 0)) {
        fprintf(stderr, "fuzz_peer: %s\n", err.message);
        abort();
    }
    return 0;
}

/* Sets the header CRC of the 72 bytes at h right. */
static void fix_header_crc(unsigned char *h)
{
    uint32_t crc = crc32c(0, h, WIRE_HEADER_BYTES - 4);
    memcpy(h + WIRE_HEADER_BYTES - 4, &crc, 4);
}

static void decode_header(const unsigned char h[WIRE_HEADER_BYTES])
{
    unsigned char back[WIRE_HEADER_BYTES];
    struct wire_frame f;
    char why[128];
    if (wire_header_decode(h, PAYLOAD_CAP, &f, why, sizeof why) != 0) {
        expect(why[0] != '\0', "a refused header comes with a reason");
        return;
    }
    expect(f.payload_len <= PAYLOAD_CAP, "an accepted header stays within the limit");
    expect(f.ndim <= WIRE_MAX_DIMS && f.kind >= 1 && f.kind <= WIRE_KIND_MAX,
           "an accepted header has a known kind and at most 4 dimensions");
    expect(f.dtype == WIRE_BYTES || f.payload_len == wire_payload_bytes(f.dtype, f.ndim, f.shape, PAYLOAD_CAP),
           "an accepted tensor's length is what its dtype makes of its shape");
    wire_header_encode(&f, back);
    expect(memcmp(h, back, sizeof back) == 0, "an accepted header encodes back to its bytes");
}

static void fuzz_header(const uint8_t *data, size_t size)
{
    unsigned char h[WIRE_HEADER_BYTES] = {0};
    memcpy(h, data, size < sizeof h ? size : sizeof h);
    decode_header(h);
    fix_header_crc(h);
    decode_header(h);
}

/* Walks plain frames through buf and sets each header's and payload's CRC
 * right, so that the engine's checks behind them are reached. */
static void fix_stream_crcs(unsigned char *buf, size_t n)
{
    for (size_t at = 0; at + WIRE_HEADER_BYTES <= n;) {
        uint64_t len;
        memcpy(&len, buf + at + 52, 8);
        if (len <= n - at - WIRE_HEADER_BYTES) {
            uint32_t crc = crc32c(0, buf + at + WIRE_HEADER_BYTES, (size_t)len);
            memcpy(buf + at + 60, &crc, 4);
        }
        fix_header_crc(buf + at);
        if (len > n - at - WIRE_HEADER_BYTES)
            break;
        at += WIRE_HEADER_BYTES + (size_t)len;
    }
}

static void fuzz_hello(const uint8_t *data, size_t size, int with_nonce)
{
    unsigned char back[WIRE_HELLO_MAX], mac[WIRE_MAC_BYTES], nonce[WIRE_NONCE_BYTES] = {0};
    struct wire_hello h;
    char why[128];
    if (wire_hello_decode(data, size, with_nonce, &h, why, sizeof why) != 0) {
        expect(why[0] != '\0', "a refused hello comes with a reason");
        return;
    }
    expect(wire_role_ok(h.role, strlen(h.role)), "an accepted hello has a valid role");
    unsigned known = WIRE_HELLO_ENCRYPT | (with_nonce ? WIRE_HELLO_CHANNEL(3) : 0);
    expect((h.flags & ~known) == 0 && WIRE_HELLO_CHANNEL_OF(h.flags) < WIRE_CHANNELS,
           "an accepted hello has known flags (a channel in a dialer's only)");
    size_t n = wire_hello_encode(&h, with_nonce, back);
    expect(n == size && memcmp(back, data, size) == 0, "an accepted hello encodes back");
    wire_hello_mac(FUZZ_KEY, sizeof FUZZ_KEY - 1, nonce, FUZZ_JOB, FUZZ_EPOCH, h.flags,
                   h.role, mac);
    (void)wire_mac_equal(mac, h.mac);
}

/* Feeds bytes to peer_recv on the listener's end until it fails. */
static void fuzz_engine(const uint8_t *data, size_t size, int sealed)
{
    static unsigned char payload[PAYLOAD_CAP];
    struct peer_conn tx, rx;
    struct shoal_err err;
    struct wire_frame f;
    if (conn_pair(sealed, &tx, &rx) != 0)
        return;
    /* a socketpair's buffer holds libFuzzer's -max_len (see fuzz_peer.options) */
    if (write(tx.fd, data, size) != (ssize_t)size) {
        peer_close(&tx);
        peer_close(&rx);
        return;
    }
    shutdown(tx.fd, SHUT_WR);
    for (int frames = 0; frames < 1000; frames++) {
        if (peer_recv(&rx, &f, payload, sizeof payload, 1000, &err) != 0) {
            expect(strcmp(err.code, "peer_timeout") != 0, "bytes that are all there never time out");
            expect(strstr(err.message, "fuzz-listener") != NULL, "errors name the peer");
            break;
        }
        expect(f.payload_len <= sizeof payload, "a delivered frame fits the buffer");
        expect(!sealed || f.flags == WIRE_FLAG_SEALED, "sealed connections deliver sealed frames");
        expect(f.job_id == FUZZ_JOB && f.epoch == FUZZ_EPOCH, "frames are of the connection's job");
    }
    peer_close(&tx);
    peer_close(&rx);
}

/* Input of modes 5 and 6: where to alter, then a frame's fields and payload. */
struct alteration {
    uint32_t at;       /* byte of the sealed frame to xor */
    uint8_t xor_with;  /* 0: leave it */
    uint8_t shift;     /* added to the frame number when opening */
    uint8_t kind;
    uint64_t step;
};

static int parse_alteration(const uint8_t *data, size_t size, struct alteration *a)
{
    if (size < 15)
        return -1;
    memcpy(&a->at, data, 4);
    a->xor_with = data[4];
    a->shift = data[5] % 4;
    a->kind = (uint8_t)(1 + data[6] % WIRE_KIND_MAX);
    memcpy(&a->step, data + 7, 8);
    return 0;
}

static void fuzz_seal_open(const uint8_t *data, size_t size, int engine)
{
    static unsigned char frame[WIRE_SEALED_HEADER_BYTES + PAYLOAD_CAP + WIRE_TAG_BYTES];
    static unsigned char payload[PAYLOAD_CAP];
    struct alteration a;
    struct peer_conn tx, rx;
    struct shoal_err err;
    char why[128];
    if (parse_alteration(data, size, &a) != 0 || conn_pair(1, &tx, &rx) != 0)
        return;
    const uint8_t *p = data + 15;
    size_t len = size - 15 > PAYLOAD_CAP ? PAYLOAD_CAP : size - 15;
    struct wire_frame f = {.kind = a.kind, .dtype = WIRE_BYTES, .job_id = FUZZ_JOB,
                           .epoch = FUZZ_EPOCH, .step = a.step, .payload_len = len}, g;
    expect(wire_seal_begin(tx.seal->tx, 0, &f, frame) == 0, "a frame seals");
    size_t n = WIRE_SEALED_HEADER_BYTES;
    if (len) {
        expect(aead_update(tx.seal->tx, frame + n, p, len) == 0 &&
               aead_seal_end(tx.seal->tx, frame + n + len) == 0, "a payload seals");
        n += len + WIRE_TAG_BYTES;
    }
    int altered = (a.xor_with && a.at < n) || a.shift;
    if (a.at < n)
        frame[a.at] ^= a.xor_with;
    int opened;
    if (engine) {
        rx.seal->rx_frames = a.shift;
        opened = write(tx.fd, frame, n) == (ssize_t)n &&
                 peer_recv(&rx, &g, payload, sizeof payload, 1000, &err) == 0;
        expect(opened || strcmp(err.code, "peer_auth") == 0,
               "an altered sealed frame fails authentication");
    } else {
        int rc = wire_open_begin(rx.seal->rx, a.shift, frame, PAYLOAD_CAP, &g, why, sizeof why);
        expect(rc == 0 || rc == WIRE_AUTH_FAILED, "an altered sealed frame fails authentication");
        opened = rc == 0;
        if (opened && g.payload_len) {
            expect(g.payload_len == len, "the opened header is the sealed one");
            expect(aead_update(rx.seal->rx, payload, frame + WIRE_SEALED_HEADER_BYTES, len) == 0,
                   "decrypts");
            opened = aead_open_end(rx.seal->rx, frame + WIRE_SEALED_HEADER_BYTES + len) == 0;
        }
    }
    expect(opened == !altered, "a sealed frame opens exactly when nothing was changed");
    if (opened) {
        expect(g.step == a.step && g.kind == a.kind && g.payload_len == len,
               "the header arrives as sealed");
        expect(memcmp(payload, p, len) == 0, "the payload arrives as sealed");
    }
    peer_close(&tx);
    peer_close(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    log_threshold = LOG_LEVEL_ERROR; /* refusals are the point here */
    if (size < 1)
        return 0;
    static unsigned char fixed[1u << 20];
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % 8) {
    case 0: fuzz_header(rest, n); break;
    case 1: fuzz_hello(rest, n, 1); break;
    case 2: fuzz_hello(rest, n, 0); break;
    case 3: fuzz_engine(rest, n, 1); break;
    case 4: fuzz_engine(rest, n, 0); break;
    case 5: fuzz_seal_open(rest, n, 0); break;
    case 6: fuzz_seal_open(rest, n, 1); break;
    case 7:
        if (n > sizeof fixed)
            break;
        memcpy(fixed, rest, n);
        fix_stream_crcs(fixed, n);
        fuzz_engine(fixed, n, 0);
        break;
    }
    return 0;
}
