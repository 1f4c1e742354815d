/* ckpt.h - a stage's checkpoint to and from the server's store.
 *
 * Upload: the stage is written to a temporary file in the agent's data
 * directory, hashed, and queued for a PUT with its SHA-256 (the server
 * checks it and keeps it only if it matches); the local file is removed
 * once it is sent.
 * Download: the file is fetched, its SHA-256 checked against the server's,
 * and only then loaded (kern_stage_load checks its own header and checksum
 * before it changes the stage). */
#ifndef SHOAL_AGENT_CKPT_H
#define SHOAL_AGENT_CKPT_H

#include <stdint.h>

#include "../../common/err.h"
#include "../../models/checkpoint.h"
#include "assign.h"
#include "../control/control.h"
#include "../control/report.h"

/* The code of an error that is this node's own disk: the checkpoint file
 * could not be created, written or read back in data_dir (full, over a
 * quota or a file size limit, read-only, failing).  Status 507, as the
 * server's store answers its own.  A fault of this node's uploads, not of
 * the step, the job or a link: train.c goes on training. */
#define CKPT_LOCAL_STORAGE "local_storage"

/* Saves `st` as checkpoint `step` of stage `stage` of job `job_id` to a
 * file in data_dir and queues its upload on `r` (report.h), which sends it
 * in the background, retrying while the server is away.  `replica` is 0
 * but under diloco, where every replica keeps a file of its own (its AdamW
 * moments and error feedback are its own).  Returns 0 once queued, or -1
 * with err set: CKPT_LOCAL_STORAGE when the disk refused the file (none is
 * left behind), another code when the stage could not be read. */
int ckpt_queue_upload(struct reporter *r, const char *data_dir, struct kern_stage *st, int64_t job_id,
                      int64_t step, int stage, int replica, struct shoal_err *err);

/* Loads the checkpoint the assignment resumes from (as->resume_job,
 * resume_step) into `st`, stage as->stage.  When its stage files split the
 * layers as the plan does now (or the server did not say how), st loads
 * its own stage's file; otherwise every file that holds some of st's
 * tensors is fetched into a cpu stage and st is assembled from them
 * (kern_stage_assemble).  Every file is SHA-256 checked on arrival.  A
 * checkpoint with a file per replica (as->resume_replicas > 1: diloco)
 * gives each tasklet its own replica's files, or replica 0's for a
 * replica it has none of. */
int ckpt_restore(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, const struct assignment *as,
                 struct shoal_err *err);

#endif
