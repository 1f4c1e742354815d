/* hf_json.h - the JSON texts of model files (a safetensors header,
 * config.json, model.safetensors.index.json) through jansson, as the rest
 * of shoal reads JSON: parsed strictly (RFC 8259, UTF-8 checked, duplicate
 * keys and \u0000 refused), then members read with messages that name the
 * text and the member.  Not part of the public API.
 *
 * Every function that can fail returns 0 (or a pointer) on success and -1
 * (or NULL) with a sentence in err->msg that starts with `what`. */
#ifndef SHOAL_MODELS_HF_JSON_H
#define SHOAL_MODELS_HF_JSON_H

#include "../kernels/kernels.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* len bytes of text as a JSON object: a new reference the caller
 * json_decref's, or NULL with err ("<what>: <reason> at byte N"). */
json_t *hj_parse_object(const char *text, size_t len, const char *what, struct kern_err *err);

/* v (member `name`) as an integer in [lo, hi]. */
int hj_int(const json_t *v, const char *what, const char *name, int64_t lo, int64_t hi, int64_t *out,
           struct kern_err *err);
/* v as an int in [1, INT_MAX] (a size). */
int hj_size(const json_t *v, const char *what, const char *name, int *out, struct kern_err *err);
/* v as a finite number (an integer or a real). */
int hj_number(const json_t *v, const char *what, const char *name, double *out, struct kern_err *err);
/* v as true or false: *out 1 or 0. */
int hj_bool(const json_t *v, const char *what, const char *name, int *out, struct kern_err *err);
/* v as a string; *out points into v. */
int hj_string(const json_t *v, const char *what, const char *name, const char **out, struct kern_err *err);

#endif
