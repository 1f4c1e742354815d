/* test_codec.c - common/codec.h: every wire type round-trips within its
 * stated error bound (f32 exactly, bf16 to half a unit in the last place (2^-8 relative),
 * int8 to absmax/254 of its row), sizes agree with the frame check, error
 * feedback holds exactly what the link lost, and NaN, infinity, zero rows
 * and short last rows behave. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/codec.h"
#include "../../common/wire.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float uniform(void)   /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Activation-like rows: each row its own magnitude, a few outliers. */
static void fill(float *x, size_t n, size_t cols)
{
    for (size_t i = 0; i < n; i++) {
        float row_scale = powf(10.0f, (float)((i / cols) % 7) - 3.0f);
        x[i] = uniform() * row_scale * (i % 97 == 0 ? 20.0f : 1.0f);
    }
}

static void test_table(void **state)
{
    (void)state;
    const char *names[] = { "f32", "bf16", "int8" };
    for (int i = 0; i < CODEC_COUNT; i++) {
        const struct codec *c = codec_get((enum codec_id)i);
        assert_non_null(c);
        assert_string_equal(c->name, names[i]);
        assert_ptr_equal(codec_by_name(names[i]), c);
    }
    assert_null(codec_by_name("fp8"));
    assert_null(codec_by_name(NULL));
    assert_null(codec_get(CODEC_COUNT));
    assert_int_equal(codec_bytes(CODEC_F32, 1000, 256), 4000);
    assert_int_equal(codec_bytes(CODEC_BF16, 1000, 256), 2000);
    assert_int_equal(codec_bytes(CODEC_INT8, 1000, 256), 1000 + 4 * 4);
    /* a stage link of B=8 T=64 C=128: what the frame check wants */
    uint32_t shape[3] = { 8, 64, 128 };
    for (int i = 0; i < CODEC_COUNT; i++) {
        const struct codec *c = codec_get((enum codec_id)i);
        assert_int_equal(codec_bytes(c->id, 8 * 64 * 128, 128), wire_payload_bytes(c->dtype, 3, shape, 1u << 30));
    }
    /* int8 sends at least 3.5x fewer bytes than f32 from 37 channels on */
    for (uint64_t C = 37; C <= 8192; C *= 2)
        assert_true((double)codec_bytes(CODEC_F32, 64 * C, C) / (double)codec_bytes(CODEC_INT8, 64 * C, C) >= 3.5);
}

/* Round trip of n values in rows of cols through codec id; checks every
 * value against its bound and error feedback against what was lost. */
static void round_trip(enum codec_id id, size_t n, size_t cols)
{
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *e = calloc(n, sizeof *e);
    unsigned char *wire = malloc(codec_bytes(id, n, cols) + 1);
    assert_true(x && y && e && wire);
    fill(x, n, cols);
    wire[codec_bytes(id, n, cols)] = 0xa5;   /* nothing written past the end */
    codec_encode(id, x, n, cols, wire, e);
    assert_int_equal(wire[codec_bytes(id, n, cols)], 0xa5);
    codec_decode(id, wire, n, cols, y, 0);
    for (size_t r = 0; r * cols < n; r++) {
        size_t first = r * cols, len = n - first < cols ? n - first : cols;
        float absmax = 0;
        for (size_t i = first; i < first + len; i++)
            absmax = fmaxf(absmax, fabsf(x[i]));
        for (size_t i = first; i < first + len; i++) {
            float d = fabsf(x[i] - y[i]);
            if (id == CODEC_F32)
                assert_true(d == 0);
            else if (id == CODEC_BF16)
                assert_true(d <= fabsf(x[i]) * 0x1p-8f);
            else if (d > absmax / 254.0f * 1.0001f)
                fail_msg("int8 row %zu value %zu: %g -> %g, bound %g", r, i, x[i], y[i], absmax / 254.0f);
            /* error feedback holds exactly what was lost */
            assert_true(e[i] == x[i] - y[i]);
        }
    }
    /* decode with add adds the same values */
    for (size_t i = 0; i < n; i++)
        e[i] = 1.5f;
    codec_decode(id, wire, n, cols, e, 1);
    for (size_t i = 0; i < n; i++)
        assert_true(e[i] == 1.5f + y[i]);
    /* encoding the decoded values again gives the same bytes (what a
     * forwarding rank would send) */
    unsigned char *again = malloc(codec_bytes(id, n, cols));
    codec_encode(id, y, n, cols, again, NULL);
    codec_decode(id, again, n, cols, e, 0);
    assert_memory_equal(e, y, n * sizeof *y);
    free(again);
    free(x);
    free(y);
    free(e);
    free(wire);
}

static void test_round_trips(void **state)
{
    (void)state;
    size_t sizes[][2] = { { 128 * 64, 128 }, { 1000, 256 }, { 1, 256 }, { 300, 7 }, { 4096, 4096 } };
    for (int i = 0; i < CODEC_COUNT; i++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            round_trip((enum codec_id)i, sizes[k][0], sizes[k][1]);
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1) */
    assert_true(codec_bf16_round(1.0f + 0x1p-8f) == 1.0f);
    /* 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6) */
    assert_true(codec_bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    assert_true(codec_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    assert_true(isnan(codec_bf16_round(NAN)));
    assert_true(isinf(codec_bf16_round(INFINITY)) && codec_bf16_round(-INFINITY) < 0);
    assert_true(codec_bf16_round(-0.0f) == 0 && signbit(codec_bf16_round(-0.0f)));
    /* past the largest bf16 and half a unit, to infinity */
    assert_true(isinf(codec_bf16_round(3.4028235e38f)));
}

static void test_int8_special_rows(void **state)
{
    (void)state;
    enum { C = 16 };
    float x[4 * C], y[4 * C];
    unsigned char wire[4 * C + 16];
    memset(x, 0, sizeof x);                 /* row 0: zeros */
    for (int i = 0; i < C; i++) {
        x[C + i] = (float)i - 8;            /* row 1: plain */
        x[2 * C + i] = 1e-3f * (float)i;    /* row 2: holds a NaN */
        x[3 * C + i] = 1.0f;                /* row 3: holds an infinity */
    }
    x[2 * C + 5] = NAN;
    x[3 * C + 9] = -INFINITY;
    codec_encode(CODEC_INT8, x, 4 * C, C, wire, NULL);
    codec_decode(CODEC_INT8, wire, 4 * C, C, y, 0);
    for (int i = 0; i < C; i++) {
        assert_true(y[i] == 0);
        assert_true(fabsf(y[C + i] - x[C + i]) <= 8.0f / 254.0f);
        assert_true(isnan(y[2 * C + i]));   /* a diverged row stays visibly diverged */
        assert_true(isnan(y[3 * C + i]));
    }
    /* the absmax value itself comes back exactly */
    assert_true(y[C] == -8.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_int8_special_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
