/* checkpoint.h - stage files: one pipeline stage's parameters, AdamW
 * state and extra per-parameter state on disk (layout in checkpoint.c), and
 * the assembly of a stage from stages of another layer split.  The stage
 * object and its buffers are kernels/'s (kernels.h); this is the file
 * format around them. */
#ifndef SHOAL_MODELS_CHECKPOINT_H
#define SHOAL_MODELS_CHECKPOINT_H

#include "../kernels/kernels.h"

#include <stdint.h>
#include <stdio.h>

/* Stage files: magic "SHOALSTG", version, model, layer range, which extras
 * it holds, AdamW step, parameters, both AdamW moments (left out, zero,
 * when the stage is at AdamW step 0 with zero moments) and the extras, and
 * a checksum. Load checks that the file belongs to the same model and layer
 * range and is whole before it changes anything.  Version 1 files (no
 * extras) load too. */
#define KERN_STAGE_FILE_VERSION 4
/* Version 4 files may carry a source section after the buffers: the stage's
 * file_source bytes (a JSON object of the Hugging Face files the model was
 * imported from, models/hf_source.h), at most this many. */
#define KERN_STAGE_SOURCE_MAX (64u << 20)
int kern_stage_save(struct kern_stage *st, FILE *f, struct kern_err *err);
int kern_stage_load(struct kern_stage *st, FILE *f, struct kern_err *err);

/* Fills st's parameters and both AdamW moments, tensor by tensor (by name:
 * "h3.qkvw" is block 3's wherever it lives), from `sources`: stages of the
 * same model that between them hold every tensor of st, typically loaded
 * from the stage files of a checkpoint taken under another layer split.
 * All sources must be at the same AdamW step, which st takes.  Any
 * backends.  Fails, changing nothing, when a tensor is missing or of
 * another size, the models differ, or the steps do. */
int kern_stage_assemble(struct kern_stage *st, struct kern_stage *const *sources, int n_sources,
                        struct kern_err *err);

/* Reads a stage file's header: the model and the layer range and first/last
 * flags it holds (into spec; the other spec fields are left alone), so a
 * stage that can load it can be built, and the AdamW steps it has taken
 * (into *step, unless step is NULL).  The file position is back at the
 * start afterwards.  Fails on a short file, bad magic, another version, or a
 * header whose model and layers do not make its float count or whose file
 * is not the size that count makes (so a stage built from it allocates no
 * more than the file holds).  The buffers and checksum are not read.
 * Lives in stage_file.c, which links with libc and common/model.c alone
 * (the server checks uploads with it). */
int kern_stage_file_peek(FILE *f, struct model_config *model, struct kern_stage_spec *spec, uint64_t *step,
                         struct kern_err *err);

/* The stage's source: bytes its stage files carry beside the buffers (the
 * Hugging Face files a model was imported from: models/hf_source.h), kept
 * through load, save and assemble; NULL and 0 when it has none.
 * set_source copies len bytes (at most KERN_STAGE_SOURCE_MAX; len 0
 * removes it); -1 with err when they are too many or memory is short,
 * the stage unchanged. */
int kern_stage_set_source(struct kern_stage *st, const void *bytes, size_t len, struct kern_err *err);
const char *kern_stage_source(const struct kern_stage *st, size_t *len);

/* A stage file's source section (version 4), after the header is checked
 * as kern_stage_file_peek checks it: *text malloc'd and NUL-terminated,
 * *len bytes; NULL and 0 when the file has none.  The checksum is not read
 * (kern_stage_file_params or kern_stage_load reads it).  -1 with err. */
int kern_stage_file_source(FILE *f, char **text, size_t *len, struct kern_err *err);

/* A stage file's parameters alone, for a reader that trains nothing
 * (export): the header's model and layers into *model and *spec, the
 * parameters into *params (malloc'd, *n floats: the caller frees it); the
 * other buffers are read through the checksum in small pieces and not
 * kept, so this takes 4 bytes a parameter where a stage takes 16.  -1 with
 * err (a bad header, a truncated or corrupt file, memory) and *params
 * NULL. */
int kern_stage_file_params(FILE *f, struct model_config *model, struct kern_stage_spec *spec, float **params,
                           uint64_t *n, struct kern_err *err);

#endif
