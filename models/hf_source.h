/* hf_source.h - what an import keeps of a Hugging Face folder beside its
 * weights, and the files an export writes back from it.
 *
 * The source is one JSON object, {"config.json": "<text>",
 * "tokenizer.json": "<text>", ...}: each file's text verbatim (every one
 * is a JSON object itself).  `shoal-agent import` stores it in stage 0's
 * step-0 stage file (kern_stage_set_source, checkpoint.h), and the stage
 * carries it through every checkpoint after, so an export of any step
 * writes config.json as the source said it, changing only what training
 * changed (kern_hf_config_merge), derives generation_config.json from it
 * as transformers does, and copies the tokenizer files.
 *
 * Functions that can fail return 0, or -1 with a sentence in err->msg. */
#ifndef SHOAL_MODELS_HF_SOURCE_H
#define SHOAL_MODELS_HF_SOURCE_H

#include "../kernels/kernels.h"

#include <stddef.h>
#include <stdio.h>

/* The files a source may hold, config.json first; NULL ends the list. */
extern const char *const kern_hf_source_files[];
#define KERN_HF_TOKENIZER_FILES 3   /* the last three: tokenizer.json, tokenizer_config.json, special_tokens_map.json */

/* The source of n files: names[i] one of kern_hf_source_files, texts[i]
 * its lens[i] bytes, which must be a JSON object.  *out malloc'd (*out_len
 * bytes).  A file that is not a JSON object, a name not in the list or one
 * given twice is refused, naming it. */
int kern_hf_source_pack(const char *const *names, const char *const *texts, const size_t *lens, int n, char **out,
                        size_t *out_len, struct kern_err *err);

/* File `name`'s text in a source (len bytes): *text malloc'd and
 * NUL-terminated (*text_len bytes), or NULL when the source lacks it. */
int kern_hf_source_get(const char *source, size_t len, const char *name, char **text, size_t *text_len,
                       struct kern_err *err);

/* Writes the config.json of model m (whose whole-model parameters are
 * params, for GPT-2's tie_word_embeddings) with its weights stored as
 * torch_dtype ("float32", "bfloat16"): the source's config.json (config,
 * clen bytes) with every member kept as it was but those shoal's model
 * sets, which are written as m has them where their values differ (the
 * sizes, the norm and rope numbers, tie_word_embeddings, GPT-2's
 * n_positions and n_ctx after a shorter job context; a member the source
 * leaves out is transformers' default, and stays out when m says that),
 * and torch_dtype.
 * NULL config: the family's own config.json (kern_gpt2_config_write,
 * kern_llama_config_write) with torch_dtype.  Members sorted, indented by
 * two, as save_pretrained writes them. */
int kern_hf_config_merge(FILE *f, const char *config, size_t clen, const struct model_config *m, const float *params,
                         const char *torch_dtype, struct kern_err *err);

/* Writes generation_config.json as transformers' GenerationConfig.
 * from_model_config derives it from a config.json (text, len bytes, as
 * kern_hf_config_merge wrote it): bos_token_id, eos_token_id,
 * pad_token_id and decoder_start_token_id where the config sets them (the
 * family's defaults where it does not: GPT-2's 50256, Llama's 1 and 2),
 * "_from_model_config": true and the config's transformers_version. */
int kern_hf_generation_config_write(FILE *f, const char *config, size_t len, const struct model_config *m,
                                    struct kern_err *err);

#endif
