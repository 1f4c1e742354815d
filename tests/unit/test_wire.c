/* test_wire.c - common/crc32c.h and common/wire.h: the CRC against known
 * values and the portable table, frame headers round-tripping, every kind of
 * bad header refused with its reason, garbage never accepted, and the
 * handshake MAC's sensitivity to each input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../../common/crc32c.h"
#include "../../common/wire.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void test_crc32c_known_values(void **state)
{
    (void)state;
    assert_int_equal(crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(crc32c_portable(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(crc32c(0, "", 0), 0);
    unsigned char zeros[32] = {0};
    assert_int_equal(crc32c(0, zeros, 32), 0x8a9136aau); /* RFC 3720 B.4 */
    /* continuing a CRC equals computing it at once */
    assert_int_equal(crc32c(crc32c(0, "12345", 5), "6789", 4), 0xe3069283u);
}

static void test_crc32c_fast_equals_portable(void **state)
{
    (void)state;
    /* Long enough for the three-lane loop (3 x 2048 bytes) to run twice. */
    static unsigned char buf[3 * 2048 * 2 + 1031];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)next();
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 1 + n / 7)
            assert_int_equal(crc32c(7, buf + off, n), crc32c_portable(7, buf + off, n));
    /* continuing across the lane boundary equals computing at once */
    assert_int_equal(crc32c(crc32c(0, buf, 5000), buf + 5000, sizeof buf - 5000), crc32c_portable(0, buf, sizeof buf));
}

static struct wire_frame sample(void)
{
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .job_id = 42,
                           .epoch = 3, .micro_batch = 5, .step = 1ull << 40, .ndim = 3,
                           .shape = {2, 16, 64}, .payload_len = 2 * 16 * 64 * 4,
                           .payload_crc = 0xdeadbeef};
    return f;
}

static void test_header_round_trip(void **state)
{
    (void)state;
    unsigned char h[WIRE_HEADER_BYTES];
    struct wire_frame f = sample(), g;
    char why[128];
    wire_header_encode(&f, h);
    assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), 0);
    assert_int_equal(g.kind, f.kind);
    assert_int_equal(g.dtype, f.dtype);
    assert_int_equal(g.job_id, f.job_id);
    assert_int_equal(g.epoch, f.epoch);
    assert_int_equal(g.micro_batch, f.micro_batch);
    assert_true(g.step == f.step);
    assert_int_equal(g.ndim, f.ndim);
    assert_memory_equal(g.shape, f.shape, sizeof f.shape);
    assert_int_equal(g.payload_len, f.payload_len);
    assert_int_equal(g.payload_crc, f.payload_crc);
    /* magic is "SHLF" on the wire */
    assert_memory_equal(h, "SHLF", 4);
    /* opaque bytes need no shape */
    struct wire_frame b = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES, .payload_len = 17};
    wire_header_encode(&b, h);
    assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), 0);
    assert_int_equal(g.payload_len, 17);
}

/* Edits a valid header after encoding and re-signs it, so that the check
 * under test, not the header CRC, is what refuses it. */
static void resign(unsigned char h[WIRE_HEADER_BYTES])
{
    uint32_t c = crc32c(0, h, 68);
    memcpy(h + 68, &c, 4);
}

static void test_bad_headers(void **state)
{
    (void)state;
    struct {
        const char *why;
        size_t off;
        uint32_t value;
        int size;   /* bytes written at off */
        int sign;   /* re-sign the header */
        const char *msg;
    } bad[] = {
        {"magic", 0, 0x12345678, 4, 1, "bad magic"},
        {"version", 4, 2, 2, 1, "version"},
        {"header crc", 8, 43, 1, 0, "CRC"},
        {"kind 0", 6, 0, 2, 1, "kind"},
        {"kind 99", 6, 99, 2, 1, "kind"},
        {"dtype", 32, 9, 2, 1, "dtype"},
        {"ndim", 34, 5, 2, 1, "dimensions"},
        {"shape beyond ndim", 48, 1, 4, 1, "beyond ndim"},
        {"reserved", 64, 1, 4, 1, "reserved"},
        {"length vs shape", 52, 8191, 4, 1, "does not match"},
        {"huge shape", 36, 0xffffffffu, 4, 1, "limit"},
        {"payload over limit", 56, 1, 4, 1, "limit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char h[WIRE_HEADER_BYTES];
        struct wire_frame f = sample(), g;
        char why[128] = "";
        wire_header_encode(&f, h);
        memcpy(h + bad[i].off, &bad[i].value, (size_t)bad[i].size);
        if (bad[i].sign)
            resign(h);
        if (wire_header_decode(h, 1 << 20, &g, why, sizeof why) != -1 ||
            !strstr(why, bad[i].msg))
            fail_msg("%s: decode said '%s'", bad[i].why, why);
    }
}

static void test_garbage_never_accepted(void **state)
{
    (void)state;
    unsigned char h[WIRE_HEADER_BYTES], good[WIRE_HEADER_BYTES];
    struct wire_frame f = sample(), g;
    char why[128];
    wire_header_encode(&f, good);
    /* any single flipped bit is caught */
    for (int bit = 0; bit < WIRE_HEADER_BYTES * 8; bit++) {
        memcpy(h, good, sizeof h);
        h[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), -1);
    }
    /* random bytes, and random bytes behind a valid magic and version */
    for (int i = 0; i < 20000; i++) {
        for (size_t j = 0; j < sizeof h; j++)
            h[j] = (unsigned char)next();
        if (i & 1)
            memcpy(h, good, 6);
        assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), -1);
    }
}

static void test_hello_mac(void **state)
{
    (void)state;
    unsigned char nonce[WIRE_NONCE_BYTES], mac[WIRE_MAC_BYTES], other[WIRE_MAC_BYTES];
    for (int i = 0; i < WIRE_NONCE_BYTES; i++)
        nonce[i] = (unsigned char)i;
    wire_hello_mac("secret", 6, nonce, 7, 1, "stage=1 replica=0", mac);
    wire_hello_mac("secret", 6, nonce, 7, 1, "stage=1 replica=0", other);
    assert_true(wire_mac_equal(mac, other));
    wire_hello_mac("secreT", 6, nonce, 7, 1, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 8, 1, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 7, 2, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 7, 1, "stage=0 replica=1", other);
    assert_false(wire_mac_equal(mac, other));
    nonce[31] ^= 1;
    wire_hello_mac("secret", 6, nonce, 7, 1, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_values),
        cmocka_unit_test(test_crc32c_fast_equals_portable),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_garbage_never_accepted),
        cmocka_unit_test(test_hello_mac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
