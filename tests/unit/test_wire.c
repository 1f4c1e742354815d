/* test_wire.c - common/crc32c.h, common/aead.h and common/wire.h: the CRC
 * against known values and the portable table, frame headers round-tripping,
 * every kind of bad header refused with its reason, garbage never accepted,
 * the handshake MAC's sensitivity to each input, hello payloads, AES-256-GCM
 * and HKDF against published vectors, session keys, and sealed frames
 * refusing every altered byte, a wrong frame number and a wrong key. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/aead.h"
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
        {"version 1", 4, 1, 2, 1, "version"},
        {"version 9", 4, 9, 2, 1, "version 9, this agent 8"},
        {"header crc", 8, 43, 1, 0, "CRC"},
        {"kind 0", 6, 0, 2, 1, "kind"},
        {"kind 99", 6, 99, 2, 1, "kind"},
        {"dtype", 32, 9, 2, 1, "dtype"},
        {"ndim", 34, 5, 2, 1, "dimensions"},
        {"shape beyond ndim", 48, 1, 4, 1, "beyond ndim"},
        {"unknown flag", 64, 2, 4, 1, "flags"},
        {"high flag", 64, 0x80000000u, 4, 1, "flags"},
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

/* WIRE_Q8 frames (version 3): a f32 scale per row of shape[ndim-1]
 * int8 values, and nothing else, is a valid length. */
static void test_int8_frames(void **state)
{
    (void)state;
    unsigned char h[WIRE_HEADER_BYTES];
    struct wire_frame f = sample(), g;
    char why[160] = "";
    f.dtype = WIRE_Q8;
    f.payload_len = 2 * 16 * 64 + 4 * 2 * 16;
    wire_header_encode(&f, h);
    assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), 0);
    assert_int_equal(g.dtype, WIRE_Q8);
    assert_int_equal(wire_payload_bytes(WIRE_Q8, 3, f.shape, 1 << 20), f.payload_len);
    assert_int_equal(wire_payload_bytes(WIRE_BF16, 3, f.shape, 1 << 20), 2 * 16 * 64 * 2);
    uint64_t wrong[] = { 2 * 16 * 64, 2 * 16 * 64 * 4, f.payload_len + 1, f.payload_len - 4 };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        f.payload_len = wrong[i];
        wire_header_encode(&f, h);
        assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), -1);
        assert_non_null(strstr(why, "does not match"));
    }
    f.ndim = 0;
    memset(f.shape, 0, sizeof f.shape);
    f.payload_len = 0;
    wire_header_encode(&f, h);
    assert_int_equal(wire_header_decode(h, 1 << 20, &g, why, sizeof why), -1);
    assert_non_null(strstr(why, "needs a shape"));
    /* a huge row count cannot overflow the length check */
    uint32_t huge[3] = { 0xffffffffu, 0xffffffffu, 1 };
    assert_true(wire_payload_bytes(WIRE_Q8, 3, huge, UINT64_MAX / 2) == UINT64_MAX);
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
    wire_hello_mac("secret", 6, nonce, 7, 1, 0, "stage=1 replica=0", mac);
    wire_hello_mac("secret", 6, nonce, 7, 1, 0, "stage=1 replica=0", other);
    assert_true(wire_mac_equal(mac, other));
    wire_hello_mac("secreT", 6, nonce, 7, 1, 0, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 8, 1, 0, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 7, 2, 0, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    wire_hello_mac("secret", 6, nonce, 7, 1, 0, "stage=0 replica=1", other);
    assert_false(wire_mac_equal(mac, other));
    /* the encryption flag is under the MAC: clearing it is noticed */
    wire_hello_mac("secret", 6, nonce, 7, 1, WIRE_HELLO_ENCRYPT, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
    nonce[31] ^= 1;
    wire_hello_mac("secret", 6, nonce, 7, 1, 0, "stage=1 replica=0", other);
    assert_false(wire_mac_equal(mac, other));
}

/* The key of a link: HMAC-SHA256 as wire.h writes it (the value from
 * Python's hmac module), the same from both ends, and another for any
 * other secret, job, epoch or pair of roles. */
static void test_link_key(void **state)
{
    (void)state;
    const char *a = "stage=0 replica=0 node=1", *b = "stage=1 replica=0 node=2";
    unsigned char k[WIRE_KEY_BYTES], other[WIRE_KEY_BYTES];
    char hex[2 * WIRE_KEY_BYTES + 1];
    wire_link_key("secret", 6, 7, 1, a, b, k);
    for (int i = 0; i < WIRE_KEY_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", k[i]);
    assert_string_equal(hex, "6216da723ff9f06b08f9e110815ab682b3df2cdb42a7bea7fe8ccf16dc92a001");
    wire_link_key("secret", 6, 7, 1, b, a, other);
    assert_memory_equal(k, other, sizeof k);
    wire_link_key("secreT", 6, 7, 1, a, b, other);
    assert_memory_not_equal(k, other, sizeof k);
    wire_link_key("secret", 6, 8, 1, a, b, other);
    assert_memory_not_equal(k, other, sizeof k);
    wire_link_key("secret", 6, 7, 2, a, b, other);
    assert_memory_not_equal(k, other, sizeof k);
    wire_link_key("secret", 6, 7, 1, a, "stage=1 replica=0 node=3", other);
    assert_memory_not_equal(k, other, sizeof k);
    /* the NUL between the roles: "x" | "yz" is not "xy" | "z" */
    wire_link_key("secret", 6, 7, 1, "stage=0 replica=0 node=1", "stage=0 replica=0 node=12", k);
    wire_link_key("secret", 6, 7, 1, "stage=0 replica=0 node=11", "stage=0 replica=0 node=2", other);
    assert_memory_not_equal(k, other, sizeof k);
    char role[WIRE_ROLE_MAX];
    wire_role(3, 12, 4096, role);
    assert_string_equal(role, "stage=3 replica=12 node=4096");
}

static void test_hello_payloads(void **state)
{
    (void)state;
    unsigned char buf[WIRE_HELLO_MAX + 8];
    struct wire_hello h = {.flags = WIRE_HELLO_ENCRYPT, .role = "stage=3 replica=12"}, g;
    char why[128];
    for (int i = 0; i < WIRE_MAC_BYTES; i++)
        h.mac[i] = (unsigned char)(i * 7), h.nonce[i] = (unsigned char)(255 - i);
    for (int with_nonce = 0; with_nonce <= 1; with_nonce++) {
        size_t n = wire_hello_encode(&h, with_nonce, buf);
        assert_int_equal(n, WIRE_MAC_BYTES + (with_nonce ? WIRE_NONCE_BYTES : 0) + 1 + 18);
        assert_int_equal(wire_hello_decode(buf, n, with_nonce, &g, why, sizeof why), 0);
        assert_memory_equal(g.mac, h.mac, WIRE_MAC_BYTES);
        if (with_nonce)
            assert_memory_equal(g.nonce, h.nonce, WIRE_NONCE_BYTES);
        assert_int_equal(g.flags, WIRE_HELLO_ENCRYPT);
        assert_string_equal(g.role, h.role);
        /* read as the other kind, the role starts in the wrong place or the
         * length is wrong */
        assert_int_equal(wire_hello_decode(buf, n, !with_nonce, &g, why, sizeof why), -1);
        /* too short for any role, one byte of role, unknown flags, a bad role byte */
        size_t fixed = n - 18;
        assert_int_equal(wire_hello_decode(buf, fixed, with_nonce, &g, why, sizeof why), -1);
        assert_non_null(strstr(why, "length"));
        assert_int_equal(wire_hello_decode(buf, fixed + 1, with_nonce, &g, why, sizeof why), 0);
        assert_string_equal(g.role, "s");
        buf[fixed - 1] = 8;
        assert_int_equal(wire_hello_decode(buf, n, with_nonce, &g, why, sizeof why), -1);
        assert_non_null(strstr(why, "flags"));
        /* a channel: in a dialer's hello only, and only the known ones */
        buf[fixed - 1] = 1 | WIRE_HELLO_CHANNEL(WIRE_CHANNEL_RECEIVES);
        assert_int_equal(wire_hello_decode(buf, n, with_nonce, &g, why, sizeof why), with_nonce ? 0 : -1);
        if (with_nonce)
            assert_int_equal(WIRE_HELLO_CHANNEL_OF(g.flags), WIRE_CHANNEL_RECEIVES);
        buf[fixed - 1] = 1 | WIRE_HELLO_CHANNEL(WIRE_CHANNELS);
        assert_int_equal(wire_hello_decode(buf, n, with_nonce, &g, why, sizeof why), -1);
        buf[fixed - 1] = 1;
        buf[fixed + 3] = '\n';
        assert_int_equal(wire_hello_decode(buf, n, with_nonce, &g, why, sizeof why), -1);
        assert_non_null(strstr(why, "role"));
    }
    /* the longest role fits WIRE_HELLO_MAX; one more byte does not decode */
    memset(h.role, 'r', WIRE_ROLE_MAX - 1);
    h.role[WIRE_ROLE_MAX - 1] = '\0';
    size_t n = wire_hello_encode(&h, 1, buf);
    assert_int_equal(n, WIRE_HELLO_MAX);
    assert_int_equal(wire_hello_decode(buf, n, 1, &g, why, sizeof why), 0);
    buf[n] = 'r';
    assert_int_equal(wire_hello_decode(buf, n + 1, 1, &g, why, sizeof why), -1);
}

static void hex(const char *s, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
}

/* The GCM specification's test case 16 (AES-256, 60 bytes, 20 bytes of
 * associated data), through counter/part nonces, sealed in uneven pieces
 * and opened in place. */
static void test_aead_gcm_vector(void **state)
{
    (void)state;
    unsigned char key[32], iv[12], p[60], a[20], c[60], t[16], out[60], tag[16];
    hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key, 32);
    hex("cafebabefacedbaddecaf888", iv, 12);
    hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
        "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39", p, 60);
    hex("feedfacedeadbeeffeedfacedeadbeefabaddad2", a, 20);
    hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
        "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662", c, 60);
    hex("76fc6ece0f4e1768cddf8853bb2d551b", t, 16);
    uint64_t counter;
    uint32_t part;
    memcpy(&counter, iv, 8);
    memcpy(&part, iv + 8, 4);

    struct aead *s = aead_new(key, 1), *o = aead_new(key, 0);
    assert_non_null(s);
    assert_non_null(o);
    assert_int_equal(aead_begin(s, counter, part, a, sizeof a), 0);
    assert_int_equal(aead_update(s, out, p, 7), 0);
    assert_int_equal(aead_update(s, out + 7, p + 7, 33), 0);
    assert_int_equal(aead_update(s, out + 40, p + 40, 20), 0);
    assert_int_equal(aead_seal_end(s, tag), 0);
    assert_memory_equal(out, c, 60);
    assert_memory_equal(tag, t, 16);

    assert_int_equal(aead_begin(o, counter, part, a, sizeof a), 0);
    assert_int_equal(aead_update(o, out, out, 60), 0);
    assert_int_equal(aead_open_end(o, t), 0);
    assert_memory_equal(out, p, 60);
    /* one bit of ciphertext, associated data or tag, or another nonce: refused */
    for (int what = 0; what < 4; what++) {
        memcpy(out, c, 60);
        memcpy(tag, t, 16);
        a[3] ^= what == 1;
        out[59] ^= what == 0;
        tag[0] ^= what == 2;
        assert_int_equal(aead_begin(o, counter + (what == 3), part, a, sizeof a), 0);
        assert_int_equal(aead_update(o, out, out, 60), 0);
        assert_int_equal(aead_open_end(o, tag), -1);
        a[3] ^= what == 1;
    }
    /* an opener cannot seal nor a sealer open */
    assert_int_equal(aead_seal_end(o, tag), -1);
    assert_int_equal(aead_open_end(s, tag), -1);
    aead_free(s);
    aead_free(o);
    aead_free(NULL);
    assert_string_equal(aead_name(), "AES-256-GCM");
}

/* RFC 5869 test case 1 (SHA-256). */
static void test_hkdf_vector(void **state)
{
    (void)state;
    unsigned char ikm[22], salt[13], info[10], okm[42], want[42];
    memset(ikm, 0x0b, sizeof ikm);
    for (int i = 0; i < 13; i++)
        salt[i] = (unsigned char)i;
    for (int i = 0; i < 10; i++)
        info[i] = (unsigned char)(0xf0 + i);
    hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        "34007208d5b887185865", want, 42);
    assert_int_equal(aead_hkdf_sha256(ikm, sizeof ikm, salt, sizeof salt, info, sizeof info, okm,
                                      sizeof okm), 0);
    assert_memory_equal(okm, want, 42);
    assert_int_equal(aead_hkdf_sha256(ikm, 0, salt, sizeof salt, info, sizeof info, okm,
                                      sizeof okm), -1);
}

static void test_session_keys(void **state)
{
    (void)state;
    unsigned char ln[WIRE_NONCE_BYTES] = {1}, dn[WIRE_NONCE_BYTES] = {2};
    unsigned char d2l[WIRE_KEY_BYTES], l2d[WIRE_KEY_BYTES], a[WIRE_KEY_BYTES], b[WIRE_KEY_BYTES];
    assert_int_equal(wire_session_keys("s3cret", 6, ln, dn, 7, 1, "stage=0", "stage=1", d2l, l2d),
                     0);
    assert_memory_not_equal(d2l, l2d, WIRE_KEY_BYTES); /* one key per direction */
    assert_int_equal(wire_session_keys("s3cret", 6, ln, dn, 7, 1, "stage=0", "stage=1", a, b), 0);
    assert_memory_equal(a, d2l, WIRE_KEY_BYTES); /* both ends derive the same */
    assert_memory_equal(b, l2d, WIRE_KEY_BYTES);
    /* every input changes both keys: nonces (a new connection), secret, job,
     * epoch, roles */
    for (int what = 0; what < 7; what++) {
        unsigned char ln2[WIRE_NONCE_BYTES], dn2[WIRE_NONCE_BYTES];
        memcpy(ln2, ln, sizeof ln2);
        memcpy(dn2, dn, sizeof dn2);
        ln2[5] ^= what == 0;
        dn2[31] ^= what == 1;
        assert_int_equal(wire_session_keys(what == 2 ? "s3creT" : "s3cret", 6, ln2, dn2,
                                           what == 3 ? 8 : 7, what == 4 ? 2 : 1,
                                           what == 5 ? "stage=2" : "stage=0",
                                           what == 6 ? "stage=2" : "stage=1", a, b), 0);
        assert_memory_not_equal(a, d2l, WIRE_KEY_BYTES);
        assert_memory_not_equal(b, l2d, WIRE_KEY_BYTES);
    }
    assert_int_equal(wire_session_keys("", 0, ln, dn, 7, 1, "stage=0", "stage=1", a, b), -1);
}

/* Seals frame `n` of f with payload p into out (header | tag | ct | tag);
 * returns the bytes written. */
static size_t seal_frame(struct aead *tx, uint64_t n, struct wire_frame f, const void *p,
                         unsigned char *out)
{
    assert_int_equal(wire_seal_begin(tx, n, &f, out), 0);
    assert_int_equal(f.flags, WIRE_FLAG_SEALED);
    assert_int_equal(f.payload_crc, 0);
    size_t len = (size_t)f.payload_len, at = WIRE_SEALED_HEADER_BYTES;
    if (!len)
        return at;
    assert_int_equal(aead_update(tx, out + at, p, len), 0);
    assert_int_equal(aead_seal_end(tx, out + at + len), 0);
    return at + len + WIRE_TAG_BYTES;
}

/* Opens frame n from in (n bytes); 0 with the payload in out, -1 bad
 * header, WIRE_AUTH_FAILED header or payload tag. */
static int open_frame(struct aead *rx, uint64_t n, unsigned char *in, struct wire_frame *f,
                      unsigned char *out)
{
    char why[128];
    int rc = wire_open_begin(rx, n, in, 1 << 20, f, why, sizeof why);
    if (rc != 0 || !f->payload_len)
        return rc;
    size_t len = (size_t)f->payload_len;
    assert_int_equal(aead_update(rx, out, in + WIRE_SEALED_HEADER_BYTES, len), 0);
    return aead_open_end(rx, in + WIRE_SEALED_HEADER_BYTES + len) == 0 ? 0 : WIRE_AUTH_FAILED;
}

static void test_sealed_frames(void **state)
{
    (void)state;
    unsigned char key[WIRE_KEY_BYTES] = {9, 8, 7}, other[WIRE_KEY_BYTES] = {9, 8, 6};
    struct aead *tx = aead_new(key, 1), *rx = aead_new(key, 0), *wrong = aead_new(other, 0);
    enum { LEN = 2 * 16 * 64 * 4 };
    static unsigned char p[LEN], frame[WIRE_SEALED_HEADER_BYTES + LEN + WIRE_TAG_BYTES], got[LEN],
        copy[sizeof frame];
    struct wire_frame f = sample(), g;
    for (size_t i = 0; i < LEN; i++)
        p[i] = (unsigned char)next();

    size_t n = seal_frame(tx, 5, f, p, frame);
    assert_int_equal(n, sizeof frame);
    assert_memory_not_equal(frame + WIRE_SEALED_HEADER_BYTES, p, 64); /* encrypted */
    assert_int_equal(open_frame(rx, 5, frame, &g, got), 0);
    assert_memory_equal(got, p, LEN);
    assert_int_equal(g.step, f.step);
    assert_int_equal(g.flags, WIRE_FLAG_SEALED);
    /* another frame number (a replay or reorder) or another key: refused at the header */
    assert_int_equal(open_frame(rx, 6, frame, &g, got), WIRE_AUTH_FAILED);
    assert_int_equal(open_frame(rx, 4, frame, &g, got), WIRE_AUTH_FAILED);
    assert_int_equal(open_frame(wrong, 5, frame, &g, got), WIRE_AUTH_FAILED);
    /* any flipped bit anywhere: the header's before its CRC or fields are
     * believed, the payload's or a tag's at the end */
    for (size_t bit = 0; bit < sizeof frame * 8; bit += 1 + bit / 64) {
        memcpy(copy, frame, sizeof frame);
        copy[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        assert_int_equal(open_frame(rx, 5, copy, &g, got), WIRE_AUTH_FAILED);
    }
    /* an empty payload has no payload part; the header tag covers it */
    struct wire_frame e = {.kind = WIRE_GRAD_NORM, .dtype = WIRE_BYTES, .step = 3};
    n = seal_frame(tx, 0, e, NULL, frame);
    assert_int_equal(n, WIRE_SEALED_HEADER_BYTES);
    assert_int_equal(open_frame(rx, 0, frame, &g, got), 0);
    assert_int_equal(g.payload_len, 0);
    frame[24] ^= 1; /* the step */
    assert_int_equal(open_frame(rx, 0, frame, &g, got), WIRE_AUTH_FAILED);
    /* an authentic header that is bad is still refused as bad (not sealed) */
    unsigned char plain[WIRE_SEALED_HEADER_BYTES];
    wire_header_encode(&e, plain);
    assert_int_equal(aead_begin(tx, 1, 0, plain, WIRE_HEADER_BYTES), 0);
    assert_int_equal(aead_seal_end(tx, plain + WIRE_HEADER_BYTES), 0);
    char why[128];
    assert_int_equal(wire_open_begin(rx, 1, plain, 1 << 20, &g, why, sizeof why), -1);
    assert_non_null(strstr(why, "sealed"));
    aead_free(tx);
    aead_free(rx);
    aead_free(wrong);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_values),
        cmocka_unit_test(test_crc32c_fast_equals_portable),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_int8_frames),
        cmocka_unit_test(test_garbage_never_accepted),
        cmocka_unit_test(test_hello_mac),
        cmocka_unit_test(test_link_key),
        cmocka_unit_test(test_hello_payloads),
        cmocka_unit_test(test_aead_gcm_vector),
        cmocka_unit_test(test_hkdf_vector),
        cmocka_unit_test(test_session_keys),
        cmocka_unit_test(test_sealed_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
