/* checkpoints.h - what the rest of the server asks of the checkpoint store
 * (ckpt_store.c; h_checkpoints.c receives and serves the files under
 * --checkpoint-dir, by default <data-dir>/checkpoints/). */
#ifndef SHOAL_CHECKPOINTS_H
#define SHOAL_CHECKPOINTS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

struct server;

/* Room for the data directory (up to PATH_MAX) and what we add under it;
 * the kernel refuses paths over PATH_MAX itself. */
#define CKPT_PATH_MAX (PATH_MAX + 256)

/* Files a complete checkpoint holds per stage, for the jobs row aliased j:
 * one per replica under diloco, else replica 0's. */
#define CKPT_FILES_PER_STAGE_SQL \
    "(CASE WHEN j.spec->'communication'->>'sync' = 'diloco' THEN j.replicas ELSE 1 END)"

/* Files a complete checkpoint at `step` (an SQL expression) holds per
 * stage: a job's initial weights (step 0) are one file a stage, replica
 * 0's, which every replica starts from; any other step as above. */
#define CKPT_FILES_AT_SQL(step) \
    "(CASE WHEN " step " = 0 THEN 1 ELSE " CKPT_FILES_PER_STAGE_SQL " END)"

/* The checkpoints table keeps each file's path as "checkpoints/job1/step5/
 * stage0.bin"; the file is that under --checkpoint-dir without the first
 * part.  Writes it to out; -1 when it does not fit. */
#define CKPT_REL_PREFIX "checkpoints/"
int checkpoints_file(const struct server *srv, const char *rel, char *out, size_t len);

/* The newest complete checkpoint of job `job_id` below step `below` whose
 * every stage file is on disk with the size and SHA-256 recorded for it,
 * whose files' layers (where recorded) tile the model, and whose previous
 * step every tasklet has reported (job_steps; step 0, the job's initial
 * weights, has no previous step):
 * *step gets its step, or -1 when there is none.  Files that do not match
 * are logged and that step is passed over for an older one.  Reads every
 * candidate's files whole (seconds for gigabytes).  Returns 0, or -1 with e
 * set when the database fails. */
int checkpoints_latest_valid(struct server *srv, int64_t job_id, int64_t below, int64_t *step, struct shoal_err *e);

/* ---- initial weights (ckpt_initial.c): a job's own checkpoint at step 0,
 * uploaded by the admin (shoal-agent import) before the job is first
 * scheduled, which it then starts from and recovers to until it has a
 * newer one. */

/* 0 when the admin may still upload job `job_id`'s initial weights: the
 * job is pending, has never been planned and does not resume from
 * another job's checkpoint.  Else -1 with `e` set: 409 conflict saying
 * why, 404, or the database's error. */
int checkpoints_initial_open(struct server *srv, int64_t job_id, struct shoal_err *e);

/* Where a job that has never started starts: *step gets 0 when it has
 * initial weights that are whole (a file for every stage, their layers
 * tiling the model, each on disk with its recorded size and SHA-256), -1
 * when it has none.  Returns 0, or -1 with `e` set: 409 conflict naming
 * what is missing or damaged when it has some but not all, or the
 * database's error. */
int checkpoints_initial(struct server *srv, int64_t job_id, int64_t *step, struct shoal_err *e);

/* Retention, once a checkpoint of job `job_id` is complete: deletes the
 * rows and files of every older step but the newest --checkpoint-keep
 * complete ones, the multiples of --checkpoint-keep-every and any step a
 * job resumes from (resume_from).  Failures are logged; a file left
 * behind costs disk, not correctness. */
void checkpoints_retire(struct server *srv, int64_t job_id);

/* Moves job `job` to succeeded when it is trained (every tasklet of its
 * epoch reported its last step) and its final checkpoint (step
 * total_steps) is stored whole; the last step's reports and the uploads
 * that complete a checkpoint ask, each after its own write.  Returns 1
 * when it did, 0 when the job is not done (or not running), -1 when the
 * database could not be asked (logged; the next report or upload asks
 * again). */
int checkpoints_job_done(struct server *srv, int64_t job);

#endif
