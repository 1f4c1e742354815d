/* nccl_none.c - linked instead of nccl.c where the build has no CUDA
 * (no nvcc, CUDA=0, or a sanitizer build): every call fails and says why. */
#include "nccl.h"

#define NCCL_NONE_MSG "this build has no NCCL (built with CUDA=0 or SAN=1); rebuild with CUDA=1 where " \
                      "/usr/local/cuda has NCCL, or train this stage on the cpu backend"

int nccl_built(void)
{
    return 0;
}

int nccl_group_open(const struct ctl *ctl, const atomic_int *abort, int64_t job_id, uint32_t epoch, int stage,
                    int rank, int size, int device_index, double timeout_s, struct nccl_group **out,
                    struct shoal_err *err)
{
    (void)ctl, (void)abort, (void)job_id, (void)epoch, (void)stage, (void)rank, (void)size, (void)device_index,
        (void)timeout_s;
    *out = NULL;
    return err_set(err, 501, "no_nccl", NULL, NCCL_NONE_MSG);
}

int nccl_allreduce_sum(struct nccl_group *g, float *device_data, size_t n, double timeout_s,
                       struct shoal_err *err)
{
    (void)g, (void)device_data, (void)n, (void)timeout_s;
    return err_set(err, 501, "no_nccl", NULL, NCCL_NONE_MSG);
}

int nccl_pass_loss(struct nccl_group *g, double mine, double *from_prev, double timeout_s, struct shoal_err *err)
{
    (void)g, (void)mine, (void)from_prev, (void)timeout_s;
    return err_set(err, 501, "no_nccl", NULL, NCCL_NONE_MSG);
}

int nccl_broadcast_bytes(struct nccl_group *g, int root, unsigned char **data, size_t *len, size_t len_max,
                         double timeout_s, struct shoal_err *err)
{
    (void)g, (void)root, (void)data, (void)len, (void)len_max, (void)timeout_s;
    return err_set(err, 501, "no_nccl", NULL, NCCL_NONE_MSG);
}

void nccl_group_close(struct nccl_group *g)
{
    (void)g;
}
