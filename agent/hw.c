/* hw.c - hardware facts and the start-up throughput measurement. */
#include "hw.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"

/* Times forward+backward of a middle stage holding one block (block 1 of
 * 3): the work a
 * pipeline stage does, so the number is what the scheduler's compute model
 * needs, not a peak matmul rate. */
static int measure_tflops(const struct kern_device *dev, double seconds, double *tflops, struct shoal_err *err)
{
    int gpu = dev->kind == KERN_CUDA;
    struct model_config m = { .vocab = 256, .context = gpu ? 1024 : 128, .d_model = gpu ? 2048 : 256,
                            .heads = gpu ? 16 : 4, .layers = 3 };
    struct kern_stage_spec sp = { .layer_start = 1, .layer_end = 2, .micro_batch = gpu ? 4 : 2,
                                  .seq_len = m.context, .in_flight = 1, .seed = 1 };
    struct kern_stage *st = NULL;
    struct kern_err ke = {{0}};
    size_t n = (size_t)sp.micro_batch * sp.seq_len * m.d_model;
    float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y), *g = calloc(n, sizeof *g);
    int rc = -1;
    if (!x || !y || !g) {
        err_set(err, 500, "internal", NULL, "out of memory measuring throughput");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = g[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    if (kern_stage_new(dev, &m, &sp, &st, &ke) != 0)
        goto kerr;
    int iters = 0;
    double t0 = 0;
    /* The first iteration warms caches, cuBLAS and the allocator; not timed. */
    for (int i = 0; i == 0 || mono_s() - t0 < seconds || iters < 2; i++) {
        if (i == 1)
            t0 = mono_s();
        if (kern_stage_forward(st, 0, x, NULL, y, &ke) != 0 || kern_stage_backward(st, 0, g, y, &ke) != 0)
            goto kerr;
        if (i >= 1)
            iters++;
    }
    *tflops = kern_stage_flops(st) * iters / (mono_s() - t0) / 1e12;
    rc = 0;
    goto out;
kerr:
    err_set(err, 500, "device_error", NULL, "measuring throughput: %s", ke.msg);
out:
    kern_stage_free(st);
    free(x);
    free(y);
    free(g);
    return rc;
}

int hw_measure(const struct kern_device *dev, double seconds, struct hw_facts *out, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    size_t mem = 0;
    memset(out, 0, sizeof *out);
    if (kern_device_describe(dev, out->gpu_model, sizeof out->gpu_model, &mem, &ke) != 0)
        return err_set(err, 500, "device_error", NULL, "%s", ke.msg);
    out->gpu_memory_bytes = (int64_t)mem;
    out->gpu_count = dev->kind == KERN_CUDA;
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->cpu_cores = cores > 0 ? (int)cores : 1;
    out->ram_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    return measure_tflops(dev, seconds, &out->tflops, err);
}

json_t *hw_json(const struct hw_facts *hw)
{
    return json_pack("{s:s, s:I, s:i, s:f, s:i, s:I}", "gpu_model", hw->gpu_model,
                     "gpu_memory_bytes", (json_int_t)hw->gpu_memory_bytes, "gpu_count", hw->gpu_count,
                     "tflops", hw->tflops > 1e-6 ? hw->tflops : 1e-6, "cpu_cores", hw->cpu_cores,
                     "ram_bytes", (json_int_t)hw->ram_bytes);
}
