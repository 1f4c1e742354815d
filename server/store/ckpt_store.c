/* ckpt_store.c - what the rest of the server asks of the checkpoint store
 * (checkpoints.h): where a stored file lies, the latest checkpoint whose
 * files are all there and intact, and whether a job is done.  The uploads
 * and downloads themselves are h_checkpoints.c's. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/log.h"
#include "../../common/sha256.h"
#include "checkpoints.h"
#include "db.h"
#include "queries.h"
#include "../base/server.h"

/* $1 job.  A trained job (every tasklet of its epoch reported its last
 * step) whose final checkpoint is stored whole succeeds.  Run after the
 * last step's report and after each upload that completes a checkpoint,
 * each in a statement of its own once its write is in: the later of the
 * two sees both (one statement that wrote and decided would decide on a
 * snapshot from before the other's commit). */
#define JOB_DONE_SQL \
    "UPDATE jobs r SET state = 'succeeded', finished_at = now(), updated_at = now()" \
    " WHERE r.id = $1::bigint AND " JOB_DONE_WHERE_SQL("r")

int checkpoints_job_done(struct server *srv, int64_t job)
{
    struct shoal_err e;
    char p_job[24];
    const char *params[] = { db_param_i64(p_job, job) };
    PGconn *c = db_acquire(srv->db, &e);
    PGresult *r = c ? db_exec(c, JOB_DONE_SQL, 1, params, &e) : NULL;
    int done = r ? strtol(PQcmdTuples(r), NULL, 10) > 0 : -1;   /* the rows updated: "0" or "1" */
    if (!r)   /* the next report or upload asks again, and the recovery thread's sweep */
        log_warn("job %lld: cannot check whether it is done: %s", (long long)job, e.message);
    else if (done)
        log_info("job %lld succeeded: trained, and its final checkpoint is stored", (long long)job);
    PQclear(r);
    db_release(srv->db, c);
    return done;
}

int checkpoints_file(const struct server *srv, const char *rel, char *out, size_t len)
{
    size_t k = strlen(CKPT_REL_PREFIX);
    int n = snprintf(out, len, "%s/%s", srv->cfg.checkpoint_dir, strncmp(rel, CKPT_REL_PREFIX, k) ? rel : rel + k);
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

/* True when the file of stored path `rel` has `bytes` bytes and SHA-256
 * `sha256`; a mismatch is logged. */
static int ckpt_file_valid(struct server *srv, const char *rel, int64_t bytes, const char *sha256)
{
    char path[CKPT_PATH_MAX], got[SHA256_HEX];
    struct shoal_err e;
    struct stat st;
    checkpoints_file(srv, rel, path, sizeof path);
    if (stat(path, &st) != 0 || st.st_size != bytes) {
        log_error("checkpoint file missing or of the wrong size path=%s", path);
        return 0;
    }
    if (sha256_file_hex(path, got, &e) != 0) {
        log_error("checkpoint file unreadable path=%s: %s", path, e.message);
        return 0;
    }
    if (strcmp(got, sha256) != 0) {
        log_error("checkpoint file damaged path=%s sha256=%s recorded=%s", path, got, sha256);
        return 0;
    }
    return 1;
}

int checkpoints_latest_valid(struct server *srv, int64_t job_id, int64_t below, int64_t *step, struct shoal_err *e)
{
    char p_job[24], p_below[24];
    const char *params[] = { db_param_i64(p_job, job_id), db_param_i64(p_below, below) };
    /* Complete steps, newest first, each with its stage files (and under
     * diloco every replica's). */
    json_t *res = db_query_json(srv->db,
        "SELECT coalesce(json_agg(json_build_object('step', s.step, 'files', s.files) ORDER BY s.step DESC), '[]')"
        " FROM (SELECT c.step, count(*) AS n, json_agg(json_build_object('path', c.path, 'bytes', c.bytes,"
        "   'sha256', c.sha256)) AS files FROM checkpoints c JOIN jobs j ON j.id = c.job_id"
        "   WHERE c.job_id = $1::bigint AND c.step < $2::bigint AND c.stage < j.stages"
        "     AND c.replica < " CKPT_FILES_AT_SQL("c.step")
        "   GROUP BY c.step, j.stages, j.replicas, j.spec HAVING count(*) >= j.stages * " CKPT_FILES_AT_SQL("c.step")
        /* Every tasklet reported the step before it: a replica that died
         * after the step's all-reduce but before its report leaves a hole
         * there that resuming from this step would never fill.  Step 0,
         * the initial weights, has no step before it. */
        "     AND (c.step = 0 OR " STEP_WHOLE_SQL("$1::bigint", "c.step - 1") ")"
        /* The files' layers, where said, must tile the model: a step whose
         * stages came from two different splits (a re-plan that failed
         * before it re-uploaded every stage) cannot be assembled.  Every
         * replica's files split the layers alike: replica 0's are checked. */
        "     AND (bool_or(c.layer_start IS NULL) OR (min(c.layer_start) = 0"
        "       AND max(c.layer_end) = (j.spec->'model'->>'layers')::int"
        "       AND sum(c.layer_end - c.layer_start) FILTER (WHERE c.replica = 0) = max(c.layer_end)"
        "       AND bool_and(c.layer_start = 0 OR EXISTS (SELECT 1 FROM checkpoints d WHERE d.job_id = c.job_id"
        "         AND d.step = c.step AND d.replica = c.replica AND d.layer_end = c.layer_start))))) s",
        2, params, "checkpoints", e);
    if (!res)
        return -1;
    size_t i, k;
    json_t *ck, *f;
    *step = -1;
    json_array_foreach(res, i, ck) {
        int valid = 1;
        json_array_foreach(json_object_get(ck, "files"), k, f) {
            valid = valid && ckpt_file_valid(srv, json_string_value(json_object_get(f, "path")),
                                             json_integer_value(json_object_get(f, "bytes")),
                                             json_string_value(json_object_get(f, "sha256")));
        }
        if (valid) {
            *step = json_integer_value(json_object_get(ck, "step"));
            break;
        }
        log_warn("checkpoint job=%lld step=%lld is damaged; trying an older one", (long long)job_id,
                 (long long)json_integer_value(json_object_get(ck, "step")));
    }
    json_decref(res);
    return 0;
}
