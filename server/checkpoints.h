/* checkpoints.h - what the rest of the server asks of the checkpoint store
 * (h_checkpoints.c keeps the files under --checkpoint-dir, by default
 * <data-dir>/checkpoints/). */
#ifndef SHOAL_CHECKPOINTS_H
#define SHOAL_CHECKPOINTS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

struct server;

/* Files a complete checkpoint holds per stage, for the jobs row aliased j:
 * one per replica under diloco, else replica 0's. */
#define CKPT_FILES_PER_STAGE_SQL \
    "(CASE WHEN j.spec->'communication'->>'sync' = 'diloco' THEN j.replicas ELSE 1 END)"

/* The checkpoints table keeps each file's path as "checkpoints/job1/step5/
 * stage0.bin"; the file is that under --checkpoint-dir without the first
 * part.  Writes it to out; -1 when it does not fit. */
#define CKPT_REL_PREFIX "checkpoints/"
int checkpoints_file(const struct server *srv, const char *rel, char *out, size_t len);

/* The newest complete checkpoint of job `job_id` below step `below` whose
 * every stage file is on disk with the size and SHA-256 recorded for it,
 * and whose previous step every tasklet has reported (job_steps):
 * *step gets its step, or -1 when there is none.  Files that do not match
 * are logged and that step is passed over for an older one.  Reads every
 * candidate's files whole (seconds for gigabytes).  Returns 0, or -1 with e
 * set when the database fails. */
int checkpoints_latest_valid(struct server *srv, int64_t job_id, int64_t below, int64_t *step, struct shoal_err *e);

/* Retention, once a checkpoint of job `job_id` is complete: deletes the
 * rows and files of every older step but the newest --checkpoint-keep
 * complete ones, the multiples of --checkpoint-keep-every and any step a
 * job resumes from (resume_from).  Failures are logged; a file left
 * behind costs disk, not correctness. */
void checkpoints_retire(struct server *srv, int64_t job_id);

#endif
