/* gpt2_llmc.c - llm.c's GPT-2 checkpoints (model_io.h), the format of
 * gpt2_124M.bin: what train_gpt2.py's write_model writes and train_gpt2.c's
 * gpt2_build_from_checkpoint reads.  Little-endian:
 *
 *   int32 header[256]  [0] magic 20240326, [1] version (3: fp32, 5: bf16),
 *                      [2] max_seq_len (context), [3] vocab_size V,
 *                      [4] num_layers L, [5] num_heads NH, [6] channels C,
 *                      [7] padded_vocab_size Vp (V rounded up to 128); 0 after
 *   parameters, fp32 or bf16 as the version says, each block tensor for all
 *   L blocks in a row:
 *     wte (Vp,C)  wpe (context,C)  ln1w (L,C)  ln1b (L,C)  qkvw (L,3C,C)
 *     qkvb (L,3C)  attprojw (L,C,C)  attprojb (L,C)  ln2w (L,C)  ln2b (L,C)
 *     fcw (L,4C,C)  fcb (L,4C)  fcprojw (L,C,4C)  fcprojb (L,C)  lnfw (C)  lnfb (C)
 *
 * The block tensors come in the order of enum kern_block_tensor and their
 * matrices are (out, in) as shoal's are, so the only reordering is llm.c's
 * tensor-major order to shoal's block-major one.  There is no head: llm.c
 * ties it to wte, whose rows [V, Vp) are padding (llm.c writes zeros there
 * and never reads them).
 */
#include "model_io_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_FP32 3
#define LLMC_BF16 5
#define LLMC_VOCAB_MULTIPLE 128 /* train_gpt2.py's pad_vocab */
enum { H_MAGIC, H_VERSION, H_CONTEXT, H_VOCAB, H_LAYERS, H_HEADS, H_CHANNELS, H_PADDED, H_INTS = 256 };

/* The index in the whole model's tensor table (layout.c: wte, wpe, 12 per
 * block, lnfw, lnfb, head) of llm.c's k-th tensor, k in [0, 12 L + 4):
 * wte, wpe, then block tensor t of block l at 2 + t L + l, then lnfw, lnfb. */
static int llmc_tensor(int L, int k)
{
    if (k < 2)
        return k;
    if (k < 2 + KT_BLOCK_COUNT * L) {
        int t = (k - 2) / L, l = (k - 2) % L;
        return 2 + l * KT_BLOCK_COUNT + t;
    }
    return k; /* lnfw, lnfb: the same place in both */
}

static int llmc_read(const struct io_src *src, struct model_config *model, float **params,
                     struct kern_err *err)
{
    static const char *const field[] = {"magic", "version", "max_seq_len", "vocab_size", "num_layers",
                                        "num_heads", "channels", "padded_vocab_size"};
    int32_t h[H_INTS];
    struct kern_stage w;
    float *p = NULL;
    int rc = -1;

    memset(&w, 0, sizeof w);
    if (src->size < KERN_LLMC_HEADER_BYTES)
        return kern_fail(err, "llm.c checkpoint: the file is %llu bytes, shorter than the %d-byte header",
                         (unsigned long long)src->size, KERN_LLMC_HEADER_BYTES);
    if (io_read(src, 0, h, sizeof h, err))
        return io_fail_in(err, "llm.c checkpoint");
    if (h[H_MAGIC] != KERN_LLMC_MAGIC)
        return kern_fail(err, "not an llm.c GPT-2 checkpoint: magic %d, want %d%s", h[H_MAGIC],
                         KERN_LLMC_MAGIC,
                         h[H_MAGIC] == 20240328 ? " (this is llm.c's tokenizer file)"
                         : h[H_MAGIC] == 20240327 ? " (this is llm.c's debug state file)" : "");
    if (h[H_VERSION] != LLMC_FP32 && h[H_VERSION] != LLMC_BF16)
        return kern_fail(err, "llm.c checkpoint: version %d; this reads %d (fp32) and %d (bf16), what "
                         "llm.c's train_gpt2.py writes today", h[H_VERSION], LLMC_FP32, LLMC_BF16);
    for (int i = H_CONTEXT; i <= H_PADDED; i++)
        if (h[i] < 1)
            return kern_fail(err, "llm.c checkpoint: %s is %d in the header", field[i], h[i]);
    if (h[H_PADDED] < h[H_VOCAB] || (int64_t)h[H_PADDED] * h[H_CHANNELS] > INT_MAX / 4)
        return kern_fail(err, "llm.c checkpoint: padded_vocab_size %d is below vocab_size %d or too large",
                         h[H_PADDED], h[H_VOCAB]);
    struct model_config m = {.vocab = h[H_VOCAB], .context = h[H_CONTEXT], .d_model = h[H_CHANNELS],
                           .heads = h[H_HEADS], .layers = h[H_LAYERS]};
    if (io_layout(&m, 0, m.layers, &w, err))
        return io_fail_in(err, "llm.c checkpoint");

    /* What the file holds: the whole model but the head, wte padded to Vp
     * rows.  The model passed the caps, so none of this overflows. */
    size_t elem = h[H_VERSION] == LLMC_FP32 ? 4 : 2, C = (size_t)m.d_model;
    uint64_t floats = w.n_params - w.tensors[w.n_tensors - 1].count + ((size_t)h[H_PADDED] - m.vocab) * C;
    uint64_t want = KERN_LLMC_HEADER_BYTES + elem * floats;
    if (src->size != want) {
        kern_fail(err, "llm.c checkpoint: the header (V=%d Vp=%d T=%d C=%d NH=%d L=%d, %s) makes %llu bytes, "
                  "the file is %llu", m.vocab, h[H_PADDED], m.context, m.d_model, m.heads, m.layers,
                  elem == 4 ? "fp32" : "bf16", (unsigned long long)want, (unsigned long long)src->size);
        goto out;
    }
    if (!(p = malloc(w.n_params * sizeof *p))) {
        kern_fail(err, "llm.c checkpoint: out of memory for %zu parameters", w.n_params);
        goto out;
    }
    uint64_t off = KERN_LLMC_HEADER_BYTES;
    for (int k = 0; k < w.n_tensors - 1; k++) {
        const struct kern_tensor *t = &w.tensors[llmc_tensor(m.layers, k)];
        if (io_read_floats(src, off, elem == 4 ? IO_F32 : IO_BF16, t->count, p + t->offset, t->name, err)) {
            io_fail_in(err, "llm.c checkpoint");
            goto out;
        }
        off += elem * (k == 0 ? (size_t)h[H_PADDED] * C : t->count);
    }
    memcpy(p + w.off_head, p + w.off_wte, (size_t)m.vocab * C * sizeof *p);
    *model = m;
    *params = p;
    p = NULL;
    rc = 0;
out:
    free(p);
    io_layout_free(&w);
    return rc;
}

int kern_llmc_read(const void *data, size_t size, struct model_config *model, float **params,
                   struct kern_err *err)
{
    struct io_src src;
    io_src_mem(&src, data, size);
    return llmc_read(&src, model, params, err);
}

int kern_llmc_read_file(FILE *f, struct model_config *model, float **params, struct kern_err *err)
{
    struct io_src src;
    if (io_src_file(&src, f, err))
        return io_fail_in(err, "llm.c checkpoint");
    return llmc_read(&src, model, params, err);
}

int kern_llmc_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    static const float zeros[1024];
    struct kern_stage w;
    int rc = -1;

    if (io_check_gpt2(m, "llm.c export", err))
        return -1;
    if (io_layout(m, 0, m->layers, &w, err))
        return io_fail_in(err, "llm.c export");
    size_t vc = (size_t)m->vocab * (size_t)m->d_model;
    if (!kern_model_head_tied(m, params)) {
        size_t i = 0;
        while (i < vc && memcmp(&params[w.off_head + i], &params[w.off_wte + i], sizeof(float)) == 0)
            i++;
        kern_fail(err, "llm.c export: llm.c's format holds one matrix for the token embedding and the "
                  "output head, and this model's head differs from its wte (first at row %zu, column %zu): "
                  "export to safetensors instead", i / (size_t)m->d_model, i % (size_t)m->d_model);
        goto out;
    }
    int32_t h[H_INTS] = {0};
    h[H_MAGIC] = KERN_LLMC_MAGIC;
    h[H_VERSION] = LLMC_FP32;
    h[H_CONTEXT] = m->context;
    h[H_VOCAB] = m->vocab;
    h[H_LAYERS] = m->layers;
    h[H_HEADS] = m->heads;
    h[H_CHANNELS] = m->d_model;
    h[H_PADDED] = (m->vocab + LLMC_VOCAB_MULTIPLE - 1) / LLMC_VOCAB_MULTIPLE * LLMC_VOCAB_MULTIPLE;
    if (io_write(f, h, sizeof h, "llm.c export", err))
        goto out;
    for (int k = 0; k < w.n_tensors - 1; k++) {
        const struct kern_tensor *t = &w.tensors[llmc_tensor(m->layers, k)];
        if (io_write(f, params + t->offset, t->count * sizeof(float), "llm.c export", err))
            goto out;
        /* wte's padding rows */
        for (size_t left = k == 0 ? ((size_t)h[H_PADDED] - m->vocab) * m->d_model : 0; left > 0;) {
            size_t n = left < 1024 ? left : 1024;
            if (io_write(f, zeros, n * sizeof(float), "llm.c export", err))
                goto out;
            left -= n;
        }
    }
    if (fflush(f) != 0) {
        kern_fail(err, "llm.c export: write failed");
        goto out;
    }
    rc = 0;
out:
    io_layout_free(&w);
    return rc;
}
