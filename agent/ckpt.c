/* ckpt.c - checkpoint upload and download (ckpt.h). */
#include "ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CKPT_DEADLINE_S 600.0   /* retrying an upload or download at most this long */

static void ckpt_paths(const char *data_dir, int64_t job_id, int64_t step, int stage, const char *what,
                       char *file, size_t file_len, char *path, size_t path_len)
{
    snprintf(file, file_len, "%s/%s-job%lld-step%lld-stage%d.tmp", data_dir, what, (long long)job_id,
             (long long)step, stage);
    snprintf(path, path_len, "/v1/jobs/%lld/checkpoints/%lld/stages/%d", (long long)job_id, (long long)step,
             stage);
}

int ckpt_upload(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, int64_t job_id,
                int64_t step, int stage, struct shoal_err *err)
{
    char file[4200], path[128], sha[65];
    struct kern_err ke = {{0}};
    int rc = -1;
    ckpt_paths(data_dir, job_id, step, stage, "upload", file, sizeof file, path, sizeof path);
    FILE *f = fopen(file, "wb");
    if (!f) {
        err_set(err, 500, "io_error", NULL, "cannot create %s: %s", file, strerror(errno));
        goto out;
    }
    int saved = kern_stage_save(st, f, &ke);
    if (fclose(f) != 0 || saved != 0) {
        err_set(err, 500, "io_error", NULL, "cannot write checkpoint %s: %s", file,
                saved ? ke.msg : strerror(errno));
        goto out;
    }
    if (ctl_file_sha256(file, sha, err) != 0)
        goto out;
    rc = ctl_put_file(ctl, path, file, sha, CKPT_DEADLINE_S, NULL, err);
out:
    unlink(file);
    return rc;
}

int ckpt_download(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, int64_t job_id,
                  int64_t step, int stage, struct shoal_err *err)
{
    char file[4200], path[128];
    struct kern_err ke = {{0}};
    int rc = -1;
    ckpt_paths(data_dir, job_id, step, stage, "download", file, sizeof file, path, sizeof path);
    if (ctl_get_file(ctl, path, file, CKPT_DEADLINE_S, err) != 0)
        goto out;
    FILE *f = fopen(file, "rb");
    if (!f) {
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", file, strerror(errno));
        goto out;
    }
    rc = kern_stage_load(st, f, &ke);
    fclose(f);
    if (rc != 0)
        err_set(err, 422, "bad_checkpoint", NULL, "checkpoint %s of job %lld: %s", path, (long long)job_id, ke.msg);
    else if (kern_stage_step(st) != (uint64_t)step)
        rc = err_set(err, 422, "bad_checkpoint", NULL, "checkpoint %s holds step %llu, not %lld", path,
                     (unsigned long long)kern_stage_step(st), (long long)step);
out:
    unlink(file);
    return rc;
}
