/* codec.h - how float tensors travel on a link: the one table of wire
 * types a job can choose for its stage links (activations forward, their
 * gradients backward) and for DiLoCo's pseudo-gradients.
 *
 *   name   wire dtype   bytes of r rows of c values   error of one value x
 *   f32    WIRE_F32     4rc                            none
 *   bf16   WIRE_BF16    2rc                            |x| * 2^-8 (round to nearest even)
 *   int8   WIRE_Q8      rc + 4r                        absmax(row) / 254
 *
 * int8 is symmetric absmax quantization with one f32 scale per row (a
 * token's C channels on a stage link; a block of CODEC_BLOCK values of a
 * flat buffer): scale = absmax / 127, q = round(x / scale) in [-127, 127],
 * x' = q * scale.  A payload holds every row's scale first (r little-endian
 * f32), then the r*c int8 values row by row.  A row with a NaN or an
 * infinity has scale NaN and decodes to NaN: a diverged run stays visibly
 * diverged, as in f32.
 *
 * The scheduler prices a job's links with codec_bytes, the agents pack
 * and unpack with codec_encode/decode, and the frame check
 * (wire_payload_bytes) holds a frame to the same sizes.  A new wire type
 * is a row here, a dtype in wire.h, and a case in test_codec.c. */
#ifndef SHOAL_CODEC_H
#define SHOAL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum codec_id { CODEC_F32, CODEC_BF16, CODEC_INT8, CODEC_COUNT };

/* Values per scale when a flat buffer (a pseudo-gradient) is sent as int8. */
#define CODEC_BLOCK 256

struct codec {
    enum codec_id id;
    const char *name;        /* "f32", "bf16", "int8": as a job spec names it */
    uint16_t dtype;          /* enum wire_dtype of its frames */
    unsigned value_bytes;    /* bytes per value */
    unsigned row_bytes;      /* bytes per row on top (int8's scale) */
};

/* The row of `id`, or of `name`; NULL when unknown. */
const struct codec *codec_get(enum codec_id id);
const struct codec *codec_by_name(const char *name);

/* Bytes of n values sent in rows of `cols` (the last row may be shorter). */
uint64_t codec_bytes(enum codec_id id, uint64_t n, uint64_t cols);

/* Packs x[0..n) in rows of `cols` values into out (codec_bytes bytes).
 * With `error` non-NULL, adds x - decode(encode(x)) to error[0..n): what
 * the link lost, for error feedback. */
void codec_encode(enum codec_id id, const float *x, size_t n, size_t cols, void *out, float *error);

/* Unpacks n values packed by codec_encode with the same cols into x
 * (add 0), or adds them to x (add 1). */
void codec_decode(enum codec_id id, const void *in, size_t n, size_t cols, float *x, int add);

/* One value through bf16 and back: round to nearest even, NaN kept NaN. */
float codec_bf16_round(float x);

#ifdef __cplusplus
}
#endif

#endif
