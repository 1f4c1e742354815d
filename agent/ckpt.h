/* ckpt.h - a stage's checkpoint to and from the server's store.
 *
 * Upload: the stage is written to a temporary file in the agent's data
 * directory, hashed, and PUT with its SHA-256 (the server checks it and
 * keeps it only if it matches); the local file is removed after.
 * Download: the file is fetched, its SHA-256 checked against the server's,
 * and only then loaded (kern_stage_load checks its own header and checksum
 * before it changes the stage). */
#ifndef SHOAL_AGENT_CKPT_H
#define SHOAL_AGENT_CKPT_H

#include <stdint.h>

#include "../common/err.h"
#include "../kernels/kernels.h"
#include "control.h"

/* Saves `st` as checkpoint `step` of stage `stage` of job `job_id`. */
int ckpt_upload(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, int64_t job_id,
                int64_t step, int stage, struct shoal_err *err);

/* Loads checkpoint `step` of stage `stage` of job `job_id` into `st`. */
int ckpt_download(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, int64_t job_id,
                  int64_t step, int stage, struct shoal_err *err);

#endif
