/* model_json.h - a job's "model" object (POST /v1/jobs, the stored spec,
 * an assignment) to and from struct model_config (common/model.h).
 *
 *   {"architecture": "gpt2" | "llama" | "qwen2" | "qwen3" | "olmo2"
 *    (default "gpt2"),
 *    "vocab_size", "context_length", "d_model", "heads", "layers",
 *    the rotary families only: "kv_heads" (default heads), "ffn_dim"
 *    (required), "head_dim" (default d_model / heads), "sliding_window"
 *    (default 0: none),
 *    "rope_theta" (default 10000), "rope_scaling" (null, or {"rope_type":
 *    "llama3", "factor", "low_freq_factor", "high_freq_factor",
 *    "original_max_position_embeddings"}), "norm_eps" (default 1e-5),
 *    "tie_embeddings" (default false)}
 *
 * One parser for the server and the agent, so both read a model the same
 * way. */
#ifndef SHOAL_MODEL_JSON_H
#define SHOAL_MODEL_JSON_H

#include <jansson.h>

#include "err.h"
#include "model.h"

/* Validates `obj` (the member at `path`, e.g. "model") into *m, normalised
 * and checked (model_config_check): 400 for a bad shape or type, a field
 * of another architecture or a missing one, 422 for values that cannot
 * work, each naming its field ("model.kv_heads").  *m is written only on
 * success. */
int model_json_parse(const json_t *obj, const char *path, struct model_config *m, struct shoal_err *err);

/* The normalised model as JSON: every field its architecture has, defaults
 * filled (gpt2: the five sizes and "architecture").  New reference; NULL
 * when memory is short. */
json_t *model_json(const struct model_config *m);

#endif
