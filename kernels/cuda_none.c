/* cuda_none.c - linked instead of the CUDA backend where it is not built
 * (no nvcc, or a sanitizer build). */
#include "stage.h"

const struct kern_ops *const kern_cuda_ops = NULL;

int kern_cuda_device_count(struct kern_err *err)
{
    return kern_fail(err, "this build has no CUDA backend");
}
