/* checkpoints.h - what the rest of the server asks of the checkpoint store
 * (h_checkpoints.c keeps the files under <data-dir>/checkpoints/). */
#ifndef SHOAL_CHECKPOINTS_H
#define SHOAL_CHECKPOINTS_H

#include <stdint.h>

#include "../common/err.h"

struct server;

/* The newest complete checkpoint of job `job_id` below step `below` whose
 * every stage file is on disk with the size and SHA-256 recorded for it:
 * *step gets its step, or -1 when there is none.  Files that do not match
 * are logged and that step is passed over for an older one.  Reads every
 * candidate's files whole (seconds for gigabytes).  Returns 0, or -1 with e
 * set when the database fails. */
int checkpoints_latest_valid(struct server *srv, int64_t job_id, int64_t below, int64_t *step, struct shoal_err *e);

#endif
