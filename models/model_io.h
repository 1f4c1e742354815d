/* model_io.h - GPT-2 weights in and out of shoal: a whole model's parameters
 * in one flat fp32 buffer, split into (and joined from) the buffers of any
 * layer split, read from and written to the two formats people hold GPT-2
 * weights in:
 *
 *   - llm.c's checkpoint (gpt2_124M.bin and its family: train_gpt2.py's
 *     write_model), versions 3 (fp32) and 5 (bf16); tied embedding and head;
 *   - Hugging Face safetensors (model.safetensors of GPT2LMHeadModel or
 *     GPT2Model, F32, F16 or BF16), with the config.json beside it.
 *
 * The whole-model buffer is the flat parameter buffer of a stage that holds
 * layers [0, L), first and last (kernels/kernels.h, kernels/layout.c): wte (V,C), wpe
 * (context,C), the L blocks, lnfw (C), lnfb (C), head (V,C).  Matrices are
 * stored (out, in), as PyTorch's nn.Linear and llm.c hold them.
 *
 * Readers take the whole file from memory, or from a seekable FILE*, check
 * everything before they allocate what it says (sizes are bounded by the
 * file's length and KERN_MODEL_MAX_PARAMS), and refuse NaN and infinite
 * weights.  On success *params is a malloc'd whole-model buffer the caller
 * frees; on error they return -1 with a sentence in err->msg and leave
 * *model and *params as they were (a FILE*'s position is then unspecified).
 * Writers check everything before their first byte: when they refuse,
 * nothing is written; when a write fails halfway the caller removes the
 * partial file.  JSON is read through jansson (hf_json.h).
 */
#ifndef SHOAL_MODELS_MODEL_IO_H
#define SHOAL_MODELS_MODEL_IO_H

#include "../kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The largest whole model the readers accept: 2^35 parameters (128 GiB of
 * fp32), so that no header can ask for more memory than that. */
#define KERN_MODEL_MAX_PARAMS ((uint64_t)1 << 35)
/* ... and at most this many blocks (GPT-3 has 96). */
#define KERN_MODEL_MAX_LAYERS 4096

/* Floats of the whole-model buffer; 0 when the model fails kern_model_check
 * or is over KERN_MODEL_MAX_PARAMS or KERN_MODEL_MAX_LAYERS. */
size_t kern_model_param_count(const struct model_config *m);

/* Floats of the buffer of the stage holding spec's layers [layer_start,
 * layer_end) (only those and first/last are read; they must agree as
 * kern_stage_new wants); 0 when the model or range is not valid.  Equals
 * kern_stage_param_count of a stage built from the same model and spec. */
size_t kern_model_stage_param_count(const struct model_config *m, const struct kern_stage_spec *spec);

/* Copies the tensors of the stage that spec describes out of the whole
 * model into `stage` (kern_model_stage_param_count floats), ready for
 * kern_stage_write(KERN_PARAMS).  Fails, writing nothing, on a bad model or
 * range. */
int kern_model_split(const struct model_config *m, const float *whole,
                     const struct kern_stage_spec *spec, float *stage, struct kern_err *err);

/* The reverse: fills `whole` (kern_model_param_count floats) from n stage
 * buffers laid out as specs[i] says (e.g. kern_stage_read of each stage of
 * one replica).  Each tensor comes from the first stage that holds it.
 * Fails, writing nothing, when a tensor is held by none or a spec is bad. */
int kern_model_join(const struct model_config *m, const struct kern_stage_spec *specs,
                    const float *const *stages, int n, float *whole, struct kern_err *err);

/* 1 when the whole model's head equals its wte bit for bit (a tied head, as
 * GPT-2 has and llm.c's format requires), else 0. */
int kern_model_head_tied(const struct model_config *m, const float *whole);

/* ---- llm.c checkpoints ------------------------------------------------ */

#define KERN_LLMC_MAGIC 20240326
#define KERN_LLMC_HEADER_BYTES 1024 /* 256 int32 */

/* Reads an llm.c checkpoint: header (magic, version 3 fp32 or 5 bf16,
 * context, V, L, NH, C, padded V) and the parameters in llm.c's order.
 * shoal's wte and head both get wte's first V rows (the padded rows are
 * dropped, whatever they hold).  The file must be exactly the header and
 * the parameters it says. */
int kern_llmc_read(const void *data, size_t size, struct model_config *model, float **params,
                   struct kern_err *err);
int kern_llmc_read_file(FILE *f, struct model_config *model, float **params, struct kern_err *err);

/* Writes the whole model as an llm.c version 3 (fp32) checkpoint, the
 * vocabulary padded to a multiple of 128 with zero rows as llm.c pads it.
 * Refuses, writing nothing, a model whose head is not tied to wte
 * (kern_model_head_tied): the format holds one matrix for both. */
int kern_llmc_write(FILE *f, const struct model_config *m, const float *params,
                    struct kern_err *err);

/* ---- Hugging Face safetensors and config.json ------------------------- */

/* The longest JSON header a safetensors reader accepts (bytes), as the
 * safetensors library itself caps it. */
#define KERN_SAFETENSORS_HEADER_MAX (100u << 20)

/* Reads GPT-2 weights from a safetensors file: names with or without the
 * "transformer." prefix, Conv1D weights (in, out) transposed to shoal's
 * (out, in), F32, F16 or BF16; lm_head.weight when present, else the head
 * is tied to wte; the attention mask buffers (h.N.attn.bias,
 * h.N.attn.masked_bias) are skipped.  V, context, C and L come from the
 * tensors; the file does not say the number of heads, which `heads` gives
 * (config.json's n_head: kern_gpt2_config_read).  Every tensor of the model
 * must be there once, in the shape the model makes, and the tensors must
 * cover the data exactly, without overlap or gap; any other name is
 * refused. */
int kern_safetensors_read(const void *data, size_t size, int heads, struct model_config *model,
                          float **params, struct kern_err *err);
int kern_safetensors_read_file(FILE *f, int heads, struct model_config *model, float **params,
                               struct kern_err *err);

/* Writes the whole model as GPT2LMHeadModel's save_pretrained writes it:
 * "transformer."-prefixed names, F32, Conv1D weights transposed back to
 * (in, out), metadata {"format":"pt"}, the header padded with spaces to a
 * multiple of 8 bytes, tensors in shoal's order.  lm_head.weight is written
 * only when the head is not tied (kern_model_head_tied). */
int kern_safetensors_write(FILE *f, const struct model_config *m, const float *params,
                           struct kern_err *err);
/* ... in BF16 when bf16 is set (what save_pretrained writes of a bf16
 * model: each value rounded to nearest, ties to even), else F32. */
int kern_safetensors_write_as(FILE *f, const struct model_config *m, const float *params, int bf16,
                              struct kern_err *err);

/* Reads vocab_size, n_positions, n_embd, n_head and n_layer from the text of
 * a Hugging Face GPT-2 config.json (all required), and refuses a config of
 * another model: model_type other than "gpt2", an activation other than the
 * tanh GELU, n_inner other than 4 n_embd, layer_norm_epsilon other than
 * 1e-5.  Fills *model only on success. */
int kern_gpt2_config_read(const char *text, size_t len, struct model_config *model,
                          struct kern_err *err);

/* Writes the config.json that goes with kern_safetensors_write's file:
 * GPT2LMHeadModel, gelu_new, layer_norm_epsilon 1e-5, the model's sizes and
 * tie_word_embeddings (kern_model_head_tied). */
int kern_gpt2_config_write(FILE *f, const struct model_config *m, const float *params,
                           struct kern_err *err);

/* ---- a family's Hugging Face weights (Llama) ------------------------- */

#define KERN_HF_FILES_MAX 1024  /* shards an index may name */
#define KERN_HF_FILE_MAX 256    /* bytes of a shard's file name, with the NUL */

/* What model.safetensors.index.json says: the shard files its weight_map
 * names (each once, plain file names beside the index) and how many
 * tensors it maps. */
struct kern_hf_index {
    int n_files, n_names;
    char files[KERN_HF_FILES_MAX][KERN_HF_FILE_MAX];
};
int kern_hf_index_read(const char *text, size_t len, struct kern_hf_index *ix, struct kern_err *err);

/* Reads model m's weights (a family whose row names its tensors the Hugging
 * Face way: llama) from n safetensors files: a model.safetensors, or all
 * the shards an index names, in any order.  Every tensor of m once across
 * them, in the shape m makes (so the config's heads, kv heads and MLP width
 * are checked), F32, F16 or BF16; buffers that are no parameters
 * (rotary_emb.inv_freq) skipped; any other name refused.  A tied model
 * (m->tied) may leave lm_head.weight out and its head is then wte; one
 * that stores it must store wte's values.  names[i] is file i's name in
 * messages.  On success *params is the whole model (kern_model_param_count
 * floats, malloc'd). */
int kern_hf_read(const struct model_config *m, FILE *const *files, const char *const *names, int n,
                 float **params, struct kern_err *err);

/* Writes the whole model as save_pretrained writes it in one file: the
 * Hugging Face names, F32, in shoal's order, lm_head.weight left out when
 * the model is tied. */
int kern_hf_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err);
/* ... in BF16 when bf16 is set, as kern_safetensors_write_as. */
int kern_hf_write_as(FILE *f, const struct model_config *m, const float *params, int bf16, struct kern_err *err);

/* Reads a Hugging Face LlamaForCausalLM config.json into *model: model_type
 * "llama", hidden_act "silu", no attention or MLP biases, head_dim (when
 * given) d_model / heads; vocab_size, max_position_embeddings,
 * hidden_size, intermediate_size, num_attention_heads, num_hidden_layers
 * required; num_key_value_heads (default heads), rms_norm_eps (1e-6, as
 * LlamaConfig), rope_theta (10000), rope_scaling (null or type "llama3"),
 * tie_word_embeddings (false).  Anything else is refused with the reason;
 * *model is written only on success. */
int kern_llama_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err);

/* Writes the config.json save_pretrained writes for m (LlamaForCausalLM). */
int kern_llama_config_write(FILE *f, const struct model_config *m, struct kern_err *err);

#endif
