/* cuda_none.c - linked instead of the CUDA backend where it is not built
 * (no nvcc, or a sanitizer build). */
#include "stage.h"

const struct kern_ops *const kern_cuda_ops = NULL;

int kern_cuda_device_count(struct kern_err *err)
{
    return kern_fail(err, "this build has no CUDA backend");
}

int kern_cuda_describe(int index, char *name, size_t name_len, size_t *memory_bytes, struct kern_err *err)
{
    (void)index, (void)name, (void)name_len, (void)memory_bytes;
    return kern_fail(err, "this build has no CUDA backend");
}
