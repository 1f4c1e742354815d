/* ckpt_retention.c - a job's old checkpoints deleted once newer ones are
 * complete (checkpoints.h), so that a long run does not fill the disk. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../common/log.h"
#include "checkpoints.h"
#include "db.h"
#include "../base/server.h"

/* $1 job, $2 --checkpoint-keep, $3 --checkpoint-keep-every (0: none).
 * Deletes the rows of every step older than the job's $2-th newest
 * complete step, but multiples of $3 and steps some job resumes from, and
 * returns their step and path.  Step 0, a job's initial weights, counts as
 * complete with one file a stage (CKPT_FILES_AT_SQL) and is retired like
 * any other once enough newer steps are complete. */
#define RETIRE_SQL \
    "WITH j AS (SELECT id, stages, replicas, spec FROM jobs WHERE id = $1::bigint)," \
    " kept AS (SELECT c.step FROM checkpoints c JOIN j ON j.id = c.job_id" \
    "   WHERE c.stage < j.stages AND c.replica < " CKPT_FILES_AT_SQL("c.step") \
    "   GROUP BY c.step, j.stages, j.replicas, j.spec HAVING count(*) >= j.stages * " CKPT_FILES_AT_SQL("c.step") \
    "   ORDER BY c.step DESC OFFSET $2::int - 1 LIMIT 1)," \
    " gone AS (DELETE FROM checkpoints c USING kept WHERE c.job_id = $1::bigint AND c.step < kept.step" \
    "   AND NOT ($3::bigint > 0 AND c.step % $3::bigint = 0)" \
    "   AND NOT EXISTS (SELECT 1 FROM jobs r WHERE jsonb_typeof(r.spec->'resume_from') = 'object'" \
    "     AND r.spec->'resume_from'->>'job_id' = c.job_id::text AND r.spec->'resume_from'->>'step' = c.step::text)" \
    "   RETURNING c.step, c.path)" \
    " SELECT coalesce(json_agg(json_build_object('step', step, 'path', path) ORDER BY step), '[]') FROM gone"

/* Removes the stage files left in retired step directory `dir`: a step is
 * retired whole (RETIRE_SQL deletes every row of it), so none is named by
 * a row any more, and an upload whose commit never answered leaves one
 * beside the file its row names (h_checkpoints.c, ckpt_commit). */
static void retire_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "stage", 5) != 0 || n < 9 || strcmp(e->d_name + n - 4, ".bin") != 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
            log_warn("checkpoint retention: cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
    }
    closedir(d);
}

/* Removes a retired file and what else its step directory holds, then the
 * directory. */
static void retire_file(const struct server *srv, const char *rel)
{
    char path[PATH_MAX];
    if (checkpoints_file(srv, rel, path, sizeof path) != 0)
        return;
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("checkpoint retention: cannot remove %s: %s", path, strerror(errno));
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        retire_leftovers(path);
        rmdir(path);
    }
}

void checkpoints_retire(struct server *srv, int64_t job_id)
{
    struct shoal_err e;
    char p_job[24], p_keep[24], p_every[24];
    const char *params[] = { db_param_i64(p_job, job_id), db_param_i64(p_keep, srv->cfg.checkpoint_keep),
                             db_param_i64(p_every, srv->cfg.checkpoint_keep_every) };
    json_t *gone = db_query_json(srv->db, RETIRE_SQL, 3, params, "checkpoints", &e);
    if (!gone) {
        log_warn("checkpoint retention job=%lld: %s", (long long)job_id, e.message);
        return;
    }
    size_t i;
    json_t *f;
    long long last = -1;
    json_array_foreach(gone, i, f) {
        retire_file(srv, json_string_value(json_object_get(f, "path")));
        long long step = json_integer_value(json_object_get(f, "step"));
        if (step != last)
            log_info("checkpoint retired job=%lld step=%lld", (long long)job_id, step);
        last = step;
    }
    json_decref(gone);
}
