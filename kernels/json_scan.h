/* json_scan.h - a small strict JSON reader for the two JSON texts the
 * weight formats carry: a safetensors header and a config.json.  Not part of
 * the public API.
 *
 * Why not jansson, which the server and agent use: kernels/ depends on
 * nothing but libc, OpenBLAS (and CUDA where built), and every program that
 * links the kernels (the GPU test, the benchmarks, the host emulation, the
 * bundle carried to GPU machines) would have to link it too.  These two
 * texts need only a cursor that walks objects and arrays, decodes strings
 * and reads integers and numbers, so it is written here, strictly (RFC
 * 8259: UTF-8 checked, no trailing commas, no leading zeros, nesting capped)
 * and fuzzed with the readers (tests/fuzz/fuzz_safetensors.c).
 *
 * Every function returns 0 on success and -1 on error, with a sentence in
 * err->msg that names the text (`what`) and the byte offset.
 */
#ifndef SHOAL_KERNELS_JSON_SCAN_H
#define SHOAL_KERNELS_JSON_SCAN_H

#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

#define JS_MAX_DEPTH 64

struct jscan {
    const unsigned char *p, *end, *start;
    int depth;
    const char *what;   /* "safetensors header", "config.json" */
    struct kern_err *err;
};

void js_init(struct jscan *j, const void *text, size_t len, const char *what, struct kern_err *err);
/* The fail of this text: "<what>: <sentence> at byte N". */
int js_fail(struct jscan *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The next character after white space, without taking it; -1 at the end. */
int js_peek(struct jscan *j);

/* Objects: js_object(j) takes '{'; then while ((r = js_member(j, &first, key,
 * cap, &len)) == 1) { read the value }; r is 0 after the closing '}' and
 * -1 on error.  js_member reads the key (as js_string) and the ':'. */
int js_object(struct jscan *j);
int js_member(struct jscan *j, int *first, char *key, size_t cap, size_t *len);
/* Arrays alike: js_array takes '['; js_element is 1 when a value follows. */
int js_array(struct jscan *j);
int js_element(struct jscan *j, int *first);

/* A string, unescaped into out (NUL-terminated; cap bytes at most with the
 * NUL: longer is an error); \u0000 is refused. */
int js_string(struct jscan *j, char *out, size_t cap, size_t *len);
/* A non-negative integer up to UINT64_MAX (no sign, fraction or exponent). */
int js_uint64(struct jscan *j, uint64_t *v);
/* Any number, as a double. */
int js_number(struct jscan *j, double *v);
/* The literal true, false or null: *v 1, 0 or -1. */
int js_literal(struct jscan *j, int *v);
/* Skips one value of any kind. */
int js_skip(struct jscan *j);
/* Only white space is left. */
int js_finish(struct jscan *j);

#endif
