/* ckpt.c - checkpoint upload and download (ckpt.h). */
#include "ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../common/log.h"
#include "../../common/sha256.h"

#define CKPT_DEADLINE_S 600.0   /* retrying an upload or download at most this long */

/* The local file and the server path (with its query, "?replica=R" for a
 * replica's own file) of one stage file. */
static void ckpt_paths(const char *data_dir, int64_t job_id, int64_t step, int stage, int replica,
                       const char *what, char *file, size_t file_len, char *path, size_t path_len)
{
    snprintf(file, file_len, "%s/%s-job%lld-step%lld-stage%d-replica%d.tmp", data_dir, what, (long long)job_id,
             (long long)step, stage, replica);
    snprintf(path, path_len, "/v1/jobs/%lld/checkpoints/%lld/stages/%d?replica=%d", (long long)job_id,
             (long long)step, stage, replica);
}

int ckpt_queue_upload(struct reporter *r, const char *data_dir, struct kern_stage *st, int64_t job_id,
                      int64_t step, int stage, int replica, struct shoal_err *err)
{
    char file[4200], path[160], sha[SHA256_HEX], key[64];
    struct kern_err ke = {{0}};
    int fd, rc = -1;
    FILE *f = NULL;
    ckpt_paths(data_dir, job_id, step, stage, replica, "upload", file, sizeof file, path, sizeof path);
    snprintf(path + strlen(path), sizeof path - strlen(path), "&layer_start=%d&layer_end=%d",
             kern_stage_spec(st)->layer_start, kern_stage_spec(st)->layer_end);
    /* Unique: a step trained again after a re-plan may be saved while its
     * first save still waits in the queue. */
    snprintf(file + strlen(file), sizeof file - strlen(file), "-XXXXXX");
    if ((fd = mkstemp(file)) < 0 || !(f = fdopen(fd, "wb"))) {
        err_set(err, 507, CKPT_LOCAL_STORAGE, NULL, "cannot create %s: %s", file, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    int saved = kern_stage_save(st, f, &ke);
    int write_errno = ferror(f) ? errno : 0;   /* the stream's, before fclose flushes the rest */
    if (fclose(f) != 0 && !write_errno)
        write_errno = errno ? errno : EIO;
    if (write_errno) {
        err_set(err, 507, CKPT_LOCAL_STORAGE, NULL, "cannot write checkpoint %s: %s", file, strerror(write_errno));
        goto out;
    }
    if (saved != 0) {
        err_set(err, 500, "device_error", NULL, "cannot save checkpoint %s: %s", file, ke.msg);
        goto out;
    }
    if (sha256_file_hex(file, sha, err) != 0) {
        snprintf(err->code, sizeof err->code, "%s", CKPT_LOCAL_STORAGE);
        err->status = 507;
        goto out;
    }
    snprintf(key, sizeof key, "job=%lld stage=%d replica=%d", (long long)job_id, stage, replica);
    report_put_file(r, path, file, sha, key);
    return 0;   /* the queue owns the file now */
out:
    if (fd >= 0)
        unlink(file);
    return rc;
}

/* Fetches stage file `stage` (of `replica`) of checkpoint `step` of job
 * `job_id` (SHA-256 checked) and opens it; *file gets the local path (the
 * caller unlinks). */
static FILE *fetch(const struct ctl *ctl, const char *data_dir, int64_t job_id, int64_t step, int stage,
                   int replica, char file[4200], char path[160], struct shoal_err *err)
{
    ckpt_paths(data_dir, job_id, step, stage, replica, "download", file, 4200, path, 160);
    if (ctl_get_file(ctl, path, file, CKPT_DEADLINE_S, err) != 0)
        return NULL;
    FILE *f = fopen(file, "rb");
    if (!f)
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", file, strerror(errno));
    return f;
}

/* Loads stage file `stage` into `st`, which holds the same layers. */
static int load_same(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, int64_t job_id,
                     int64_t step, int stage, int replica, struct shoal_err *err)
{
    char file[4200], path[160];
    struct kern_err ke = {{0}};
    int rc = -1;
    FILE *f = fetch(ctl, data_dir, job_id, step, stage, replica, file, path, err);
    if (!f)
        goto out;
    rc = kern_stage_load(st, f, &ke);
    fclose(f);
    if (rc != 0)
        err_set(err, 422, "bad_checkpoint", NULL, "checkpoint %s of job %lld: %s", path, (long long)job_id, ke.msg);
out:
    unlink(file);
    return rc;
}

/* Loads stage file `stage` into a new cpu stage built from its header, as
 * a source for kern_stage_assemble; *out NULL on error. */
static int load_source(const struct ctl *ctl, const char *data_dir, int64_t job_id, int64_t step, int stage,
                       int replica, struct kern_stage **out, struct shoal_err *err)
{
    char file[4200], path[160];
    struct kern_err ke = {{0}};
    struct model_config m;
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .micro_batch = 1, .seq_len = 1, .in_flight = 1 };
    int rc = -1;
    *out = NULL;
    FILE *f = fetch(ctl, data_dir, job_id, step, stage, replica, file, path, err);
    if (!f)
        goto out;
    rc = kern_stage_file_peek(f, &m, &sp, NULL, &ke) || kern_stage_new(&cpu, &m, &sp, out, &ke) ||
         kern_stage_load(*out, f, &ke) ? -1 : 0;
    fclose(f);
    if (rc != 0) {
        err_set(err, 422, "bad_checkpoint", NULL, "checkpoint %s of job %lld: %s", path, (long long)job_id, ke.msg);
        kern_stage_free(*out);
        *out = NULL;
    }
out:
    unlink(file);
    return rc;
}

/* 1 when stage file `s` of the checkpoint holds a tensor `sp` needs: some
 * of its layers, or the embeddings (file 0) or the head (the last file). */
static int file_needed(const struct assignment *as, int s, const struct kern_stage_spec *sp)
{
    int ls = as->resume_layers[s].layer_start, le = as->resume_layers[s].layer_end;
    return (ls < sp->layer_end && le > sp->layer_start) || (sp->first && s == 0) ||
           (sp->last && s == as->resume_stages - 1);
}

int ckpt_restore(const struct ctl *ctl, const char *data_dir, struct kern_stage *st, const struct assignment *as,
                 struct shoal_err *err)
{
    const struct kern_stage_spec *sp = kern_stage_spec(st);
    struct kern_stage *src[ASSIGN_STAGES_MAX];
    struct kern_err ke = {{0}};
    int n = 0, rc = -1, P = as->resume_stages, known = P > 0;
    int replica = as->replica < as->resume_replicas ? as->replica : 0;   /* whose files */
    for (int s = 0; s < P; s++)
        known = known && as->resume_layers[s].layer_start >= 0;
    if (!known && P != as->stages)
        return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint of job %lld at step %lld has %d stage "
                       "files for %d stages and does not say which layers they hold", (long long)as->resume_job,
                       (long long)as->resume_step, P, as->stages);
    if (!known || (P == as->stages && as->resume_layers[as->stage].layer_start == sp->layer_start &&
                   as->resume_layers[as->stage].layer_end == sp->layer_end)) {
        if (load_same(ctl, data_dir, st, as->resume_job, as->resume_step, as->stage, replica, err) != 0)
            return -1;
    } else {
        for (int s = 0; s < P; s++) {
            if (!file_needed(as, s, sp))
                continue;
            if (load_source(ctl, data_dir, as->resume_job, as->resume_step, s, replica, &src[n], err) != 0)
                goto out;
            n++;
        }
        if (kern_stage_assemble(st, src, n, &ke) != 0) {
            err_set(err, 422, "bad_checkpoint", NULL, "checkpoint of job %lld at step %lld: %s",
                    (long long)as->resume_job, (long long)as->resume_step, ke.msg);
            goto out;
        }
        log_info("checkpoint job=%lld step=%lld assembled for layers " LAYER_RANGE_FMT " from %d stage files",
                 (long long)as->resume_job, (long long)as->resume_step, LAYER_RANGE(sp->layer_start, sp->layer_end), n);
    }
    if (kern_stage_step(st) != (uint64_t)as->resume_step) {
        err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint of job %lld at step %lld holds step %llu",
                (long long)as->resume_job, (long long)as->resume_step, (unsigned long long)kern_stage_step(st));
        goto out;
    }
    rc = 0;
out:
    for (int k = 0; k < n; k++)
        kern_stage_free(src[k]);
    return rc;
}
