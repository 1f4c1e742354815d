/* hw.h - what this machine is, as the scheduler needs to know it: the
 * device, memory, cores, and a measured throughput on the real kernels. */
#ifndef SHOAL_AGENT_HW_H
#define SHOAL_AGENT_HW_H

#include <jansson.h>
#include <stdint.h>

#include "../common/err.h"
#include "../kernels/kernels.h"

struct hw_facts {
    char gpu_model[128];        /* "" on the CPU backend */
    int64_t gpu_memory_bytes;   /* 0 on the CPU backend */
    int gpu_count;              /* devices this agent uses: 1 on CUDA, 0 on CPU */
    int cpu_cores;
    int64_t ram_bytes;
    double tflops;              /* measured: transformer-block forward+backward FLOP/s / 1e12 */
};

/* Fills `out` for device `dev`, timing forward+backward of one transformer
 * block for about `seconds` (a CPU block of C=256, T=128; a GPU block of
 * C=2048, T=1024, bf16).  Returns 0, or -1 with err set. */
int hw_measure(const struct kern_device *dev, double seconds, struct hw_facts *out, struct shoal_err *err);

/* The facts as the registration's "hardware" object (new reference). */
json_t *hw_json(const struct hw_facts *hw);

#endif
