/* codec.c - the wire types of float tensors (codec.h). */
#include "codec.h"

#include <math.h>
#include <string.h>

#include "wire.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "payloads are little-endian and so is every host shoal supports"
#endif

static const struct codec codecs[CODEC_COUNT] = {
    { CODEC_F32, "f32", WIRE_F32, 4, 0 },
    { CODEC_BF16, "bf16", WIRE_BF16, 2, 0 },
    { CODEC_INT8, "int8", WIRE_Q8, 1, 4 },
};

const struct codec *codec_get(enum codec_id id)
{
    return (unsigned)id < CODEC_COUNT ? &codecs[id] : NULL;
}

const struct codec *codec_by_name(const char *name)
{
    for (int i = 0; name && i < CODEC_COUNT; i++)
        if (strcmp(codecs[i].name, name) == 0)
            return &codecs[i];
    return NULL;
}

uint64_t codec_bytes(enum codec_id id, uint64_t n, uint64_t cols)
{
    const struct codec *c = codec_get(id);
    uint64_t rows = cols ? (n + cols - 1) / cols : 0;
    return c ? n * c->value_bytes + rows * c->row_bytes : 0;
}

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)   /* NaN: keep it one, quiet */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);       /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float codec_bf16_round(float x)
{
    return bf16_value(bf16_bits(x));
}

/* int8 of one row: its scale, and the values into q. */
static float q8_row(const float *x, size_t cols, int8_t *q)
{
    float absmax = 0;
    for (size_t i = 0; i < cols; i++) {
        float a = fabsf(x[i]);
        absmax = a > absmax || a != a ? a : absmax;   /* a NaN wins */
    }
    if (!isfinite(absmax)) {
        memset(q, 0, cols);
        return NAN;
    }
    if (absmax == 0) {
        memset(q, 0, cols);
        return 0;
    }
    float inv = 127.0f / absmax;
    for (size_t i = 0; i < cols; i++) {
        float v = rintf(x[i] * inv);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return absmax / 127.0f;
}

void codec_encode(enum codec_id id, const float *x, size_t n, size_t cols, void *out, float *error)
{
    unsigned char *o = out;
    if (id == CODEC_F32) {
        memcpy(o, x, n * sizeof *x);
        return;
    }
    if (id == CODEC_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t b = bf16_bits(x[i]);
            memcpy(o + 2 * i, &b, 2);
            if (error)
                error[i] += x[i] - bf16_value(b);
        }
        return;
    }
    size_t rows = (n + cols - 1) / cols;
    int8_t *q = (int8_t *)(o + 4 * rows);
    for (size_t r = 0; r < rows; r++) {
        size_t first = r * cols, len = n - first < cols ? n - first : cols;
        float scale = q8_row(x + first, len, q + first);
        memcpy(o + 4 * r, &scale, 4);
        for (size_t i = 0; error && i < len; i++)
            error[first + i] += x[first + i] - (float)q[first + i] * scale;
    }
}

void codec_decode(enum codec_id id, const void *in, size_t n, size_t cols, float *x, int add)
{
    const unsigned char *p = in;
    if (id == CODEC_F32 && !add) {
        memcpy(x, p, n * sizeof *x);
        return;
    }
    if (id == CODEC_F32 || id == CODEC_BF16) {
        for (size_t i = 0; i < n; i++) {
            float v;
            if (id == CODEC_F32) {
                memcpy(&v, p + 4 * i, 4);
            } else {
                uint16_t b;
                memcpy(&b, p + 2 * i, 2);
                v = bf16_value(b);
            }
            x[i] = add ? x[i] + v : v;
        }
        return;
    }
    size_t rows = (n + cols - 1) / cols;
    const int8_t *q = (const int8_t *)(p + 4 * rows);
    for (size_t r = 0; r < rows; r++) {
        size_t first = r * cols, len = n - first < cols ? n - first : cols;
        float scale;
        memcpy(&scale, p + 4 * r, 4);
        for (size_t i = first; i < first + len; i++)
            x[i] = add ? x[i] + (float)q[i] * scale : (float)q[i] * scale;
    }
}
