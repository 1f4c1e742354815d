/* model_io_impl.h - what the weight-format files share (model_io.c,
 * gpt2_llmc.c, gpt2_safetensors.c, gpt2_config.c): the whole model's
 * layout, a file read from memory or a FILE*, and element types.  Not part
 * of the public API. */
#ifndef SHOAL_MODELS_MODEL_IO_IMPL_H
#define SHOAL_MODELS_MODEL_IO_IMPL_H

#include "model_io.h"
#include "../kernels/stage.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c and safetensors files are little-endian, read here in host order"
#endif

/* The tensor table and offsets layout.c gives the stage holding layers
 * [start, end) of m (first: start == 0, last: end == L): a stage shell with
 * no backend.  Checks the model (kern_model_check), the range and
 * KERN_MODEL_MAX_PARAMS.  Free with io_layout_free. */
int io_layout(const struct model_config *m, int start, int end, struct kern_stage *shell,
              struct kern_err *err);
void io_layout_free(struct kern_stage *shell);

/* 0 when m is a GPT-2 model, which `format` (llm.c's, GPT-2's safetensors
 * and config.json) holds; else -1 naming the architecture. */
int io_check_gpt2(const struct model_config *m, const char *format, struct kern_err *err);

/* Where a reader's bytes come from: the whole file in memory, or a seekable
 * FILE* read at offsets. */
struct io_src {
    const unsigned char *mem; /* the file, or NULL */
    FILE *f;                  /* when mem is NULL */
    uint64_t size;            /* bytes */
};
void io_src_mem(struct io_src *s, const void *data, size_t size);
/* Finds the file's size (fseeko to its end); fails on a pipe. */
int io_src_file(struct io_src *s, FILE *f, struct kern_err *err);
/* n bytes at offset off into dst; off + n must lie inside the file. */
int io_read(const struct io_src *s, uint64_t off, void *dst, size_t n, struct kern_err *err);

/* Element types of stored weights. */
enum io_dtype { IO_F32, IO_F16, IO_BF16 };
size_t io_dtype_size(enum io_dtype t); /* bytes */

/* count values of type t at offset off into dst as fp32; refuses NaN and
 * infinities, naming `what` (a tensor) in the error. */
int io_read_floats(const struct io_src *s, uint64_t off, enum io_dtype t, size_t count,
                   float *dst, const char *what, struct kern_err *err);

/* Rewrites err->msg as "<prefix>: <msg>"; returns -1. */
int io_fail_in(struct kern_err *err, const char *prefix);

/* fwrite with kern_err: "<who>: write failed". */
int io_write(FILE *f, const void *p, size_t n, const char *who, struct kern_err *err);

#endif
