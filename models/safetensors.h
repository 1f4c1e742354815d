/* safetensors.h - Hugging Face's safetensors container, whatever model it
 * holds (not part of the public API): the header read and checked, and a
 * file written.  The model readers (gpt2_safetensors.c, hf_weights.c) say
 * which names they know and what each must be.
 *
 *   uint64 N           little-endian: bytes of the JSON header
 *   char   header[N]   {"__metadata__": {"format": "pt"},
 *                       "NAME": {"dtype": "F32", "shape": [r, c],
 *                                "data_offsets": [begin, end]}, ...}
 *                      padded with spaces; offsets are bytes from the
 *                      start of the data, which the tensors cover exactly
 *   data
 */
#ifndef SHOAL_MODELS_SAFETENSORS_H
#define SHOAL_MODELS_SAFETENSORS_H

#include "model_io_impl.h"

#define ST_NAME_MAX 192   /* bytes of a tensor name, with the NUL */

/* One entry of a header. */
struct st_entry {
    char name[ST_NAME_MAX];
    int kind, layer;           /* the reader's classification of the name */
    int dtype, ndim;           /* index in the dtype table (0 F32, 1 F16, 2 BF16: enum io_dtype); dimensions */
    uint64_t dim[2];           /* the first two dimensions */
    uint64_t numel;            /* elements */
    uint64_t begin, end;       /* bytes from the start of the data */
};

/* A reader's names: *kind and *layer of `name`, or -1 for a name the
 * model does not have. */
typedef int (*st_classify_fn)(const char *name, void *ctx, int *kind, int *layer);

/* The header of src: its 8-byte size checked against the file and
 * KERN_SAFETENSORS_HEADER_MAX, its text (malloc'd into *text, hlen bytes
 * and a NUL) and the bytes of data after it.  `who` prefixes errors. */
int st_header_read(const struct io_src *src, const char *who, char **text, uint64_t *hlen, uint64_t *data_len,
                   struct kern_err *err);

/* The header's entries (malloc'd into *out, *n of them), each classified;
 * a name classify refuses is an error naming `model` ("a GPT-2 model"). */
int st_parse_header(const char *text, size_t len, uint64_t data_len, st_classify_fn classify, void *ctx,
                    const char *model, struct st_entry **out, int *n, struct kern_err *err);

/* The tensors cover [0, data_len) exactly, one after another. */
int st_check_coverage(struct st_entry *e, int n, uint64_t data_len, struct kern_err *err);

/* "[a,b]", "[a]", "[]" or "[a,b,...]". */
const char *st_shape_str(int ndim, const uint64_t dim[2], char *buf, size_t cap);

/* The dtype's name ("F32", "I64", ...). */
const char *st_dtype_name(int dtype);

/* One tensor to write: rows x cols (ndim 2) or cols values (ndim 1, rows
 * 1) of fp32 from data; transpose: data is (cols, rows), written as
 * (rows, cols) (GPT-2's Conv1D). */
struct st_out {
    char name[ST_NAME_MAX];
    int ndim;
    uint64_t rows, cols;
    const float *data;
    int transpose;
};

/* Writes the file safetensors' own writer writes: the tensors in the given
 * order, F32 (or BF16 when bf16 is set: st_bf16), metadata
 * {"format":"pt"}, the header padded with spaces to a multiple of 8 bytes.
 * `who` prefixes errors. */
int st_write(FILE *f, const struct st_out *t, int n, int bf16, const char *who, struct kern_err *err);

/* x as bfloat16, rounded to nearest, ties to even (what PyTorch's
 * tensor.to(torch.bfloat16) gives); a NaN stays a NaN. */
uint16_t st_bf16(float x);

#endif
