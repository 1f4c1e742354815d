/* gpu_check.h - shared by the files of test_kernels_gpu: result lines, the
 * device under test, random numbers, and the training comparison. */
#ifndef SHOAL_TESTS_GPU_CHECK_H
#define SHOAL_TESTS_GPU_CHECK_H

#include <stdint.h>

#include "../../kernels/kernels.h"

/* Prints "ok - SCOPE WHAT (detail)" or "not ok - SCOPE WHAT: detail" and
 * counts it. */
void check(const char *scope, const char *what, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prints the counts; returns the exit status (0 all passed, 1 otherwise). */
int check_summary(void);

/* The device under test, as named on the command line. */
extern const char *dev_label;

struct rng {
    uint64_t state;
};
uint64_t rng_u64(struct rng *r);
double rng_unit(struct rng *r); /* uniform in (0,1), never 0 */
float rng_normal(struct rng *r);

/* Trains a character model as two stages on the cpu and on d with the same
 * data and compares the loss curves (gpu_training.c). */
void check_training(const struct kern_device *d);

/* A middle stage with bf16 and int8 links gives codec_encode's bytes
 * (gpu_links.c). */
void check_links(const struct kern_device *d);

#endif
