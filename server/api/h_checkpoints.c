/* h_checkpoints.c - the checkpoint store: one file per (job, step, stage),
 * or under sync "diloco" per (job, step, stage, replica).
 *
 * Replica 0 of each stage uploads its stage file (under diloco every
 * replica its own: `?replica=R`); the body is streamed to a temporary file
 * under <checkpoint-dir>/job<id>/ while it is hashed (SHA-256), never held
 * in memory whole, then fsync'ed and linked to step<step>/stage<s>.bin
 * (stage<s>-replica<r>.bin for r > 0), and the row in `checkpoints` is
 * written.  A stored file never changes: a re-upload's file goes beside
 * the old one (stage<s>-<sha256>.bin), the row is pointed at it, and then
 * the old file is removed, so the row always names a file that holds the
 * bytes of its SHA-256, whatever fails when (ckpt_commit).  Downloads are
 * served from the file descriptor.  Servers that share one database share
 * one --checkpoint-dir (a mount at the same path on each), so a file one
 * of them received is served by every other; a row whose file a server
 * cannot find is answered 404 with that said.
 *
 * Every file's header is checked before it is kept (the model, layers,
 * first/last flags against the job and the stage), so that no agent is
 * ever handed a file it cannot load.  Step 0 is the job's initial weights
 * (ckpt_initial.c): the admin uploads it, at AdamW step 0, before the job
 * is first scheduled, and no node may. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/log.h"
#include "../../common/model_json.h"
#include "../../common/sha256.h"
#include "../../common/token.h"
#include "../../models/checkpoint.h"
#include "../store/checkpoints.h"
#include "../http/http.h"
#include "routes.h"
#include "../store/db.h"

#define CKPT_SHA256_HEADER "X-Shoal-SHA256"

/* An upload between its headers and its last byte. */
struct upload {
    int fd;                       /* the temporary file; -1 once closed */
    char tmp[CKPT_PATH_MAX];      /* its path */
    EVP_MD_CTX *md;               /* SHA-256 of what was written */
    uint64_t bytes;               /* received so far */
    uint64_t cap;                 /* --max-checkpoint-bytes */
    long long layer_start, layer_end; /* the layers the file holds, as the uploader says; -1: not said */
    long long replica;            /* whose file: 0, or a diloco replica's own */
    int admin;                    /* the admin uploads initial weights (step 0) */
    struct model_config model;      /* the job's, which the file must hold */
    long long stages;             /* the job's pipeline depth */
    int too_large;
    int write_errno;              /* first write error, 0 if none */
    char want_sha256[TOKEN_HASH_HEX]; /* from the header, lowercase; "" if none */
};

/* Serialises rename + row per server, so that two uploads of the same
 * (job, step, stage, replica) cannot leave the file of one and the row of
 * the other. */
static pthread_mutex_t ckpt_commit_lock = PTHREAD_MUTEX_INITIALIZER;

/* $1 job, $2 why: the store's own failure (checkpoint_error_node NULL). */
#define CKPT_FAILED_SQL \
    "UPDATE jobs SET checkpoint_failures = checkpoint_failures + 1, checkpoint_error = $2," \
    "   checkpoint_error_node = NULL, updated_at = now()" \
    " WHERE id = $1::bigint RETURNING json_build_object('failures', checkpoint_failures)"

/* A 507 (the store failed: a full or read-only disk, an I/O error) counts
 * against the job and shows in its detail and /metrics until one of its
 * checkpoints is stored again; the agent retries the upload meanwhile,
 * and its progress reports go on beside it (agent/control/report.h). */
static void ckpt_note_failure(struct server *srv, int64_t job, const struct shoal_err *why)
{
    if (why->status != 507)
        return;
    struct shoal_err e;
    char p_job[24];
    const char *params[] = { db_param_i64(p_job, job), why->message };
    log_warn("checkpoint store failed job=%lld: %s", (long long)job, why->message);
    json_decref(db_query_json(srv->db, CKPT_FAILED_SQL, 2, params, "job", &e));
}

/* Creates `dir` and its missing parents (mode 0700). */
static int ckpt_mkdirs(const char *dir, struct shoal_err *e)
{
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return err_set(e, 507, "storage", NULL, "cannot create %s: %s", path, strerror(errno));
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* fsync's a directory so a rename in it survives a crash. */
static void ckpt_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Closes and removes the upload's temporary file, if it has one left. */
static void ckpt_upload_free_file(struct upload *u)
{
    if (u->fd < 0)
        return;
    close(u->fd);
    unlink(u->tmp);
    u->fd = -1;
}

static void ckpt_upload_free(struct upload *u)
{
    if (!u)
        return;
    ckpt_upload_free_file(u);
    EVP_MD_CTX_free(u->md);
    free(u);
}

static void ckpt_abort(struct request *rq)
{
    ckpt_upload_free(rq->upload);
    rq->upload = NULL;
}

/* Reads the optional checksum header into `out` (lowercase).  Returns 0,
 * or -1 with `e` set if it is present and not 64 hex digits. */
static int ckpt_header_sha256(struct request *rq, char out[TOKEN_HASH_HEX], struct shoal_err *e)
{
    const char *h = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, CKPT_SHA256_HEADER);
    out[0] = '\0';
    if (!h)
        return 0;
    if (strlen(h) != TOKEN_HASH_HEX - 1)
        return err_set(e, 400, "invalid_field", CKPT_SHA256_HEADER, "%s must be 64 hex digits", CKPT_SHA256_HEADER);
    for (size_t i = 0; i < TOKEN_HASH_HEX - 1; i++) {
        char c = h[i];
        if (c >= 'A' && c <= 'F')
            c = (char)(c - 'A' + 'a');
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return err_set(e, 400, "invalid_field", CKPT_SHA256_HEADER, "%s must be 64 hex digits",
                           CKPT_SHA256_HEADER);
        out[i] = c;
    }
    out[TOKEN_HASH_HEX - 1] = '\0';
    return 0;
}

/* The admin's upload (node 0): initial weights only, i.e. step 0, one file
 * (replica 0's) for each of the job's stages, before the job is first
 * scheduled.  `job_row` is ckpt_begin's.  Returns 0, or -1 with e set. */
static int ckpt_begin_admin(struct server *srv, const json_t *job_row, int64_t job, int64_t step, int64_t stage,
                            long long replica, struct shoal_err *e)
{
    long long stages = json_integer_value(json_object_get(job_row, "stages"));
    if (step != 0)
        return err_set(e, 403, "forbidden", NULL, "the admin uploads only a job's initial weights, step 0; step "
                       "%lld of job %lld is uploaded by the node that trains the stage", (long long)step,
                       (long long)job);
    if (replica != 0)
        return err_set(e, 422, "invalid_field", "replica", "initial weights are one file a stage (replica 0's), "
                       "which every replica starts from");
    if (stage >= stages)
        return err_set(e, 422, "invalid_field", "stage", "job %lld has %lld stages: stage must be below %lld",
                       (long long)job, stages, stages);
    return checkpoints_initial_open(srv, job, e);
}

/* The headers are in: check who uploads what, then open the temporary file. */
static int ckpt_begin(struct request *rq, struct response *rs)
{
    struct server *srv = rq->srv;
    struct shoal_err e;
    char p_job[24], p_stage[24], p_node[24], dir[CKPT_PATH_MAX - 16];
    struct upload *u = NULL;
    json_t *res = NULL;
    int64_t job = rq->match.ids[0], step = rq->match.ids[1], stage = rq->match.ids[2];
    char want[TOKEN_HASH_HEX], p_replica[24];
    long long ls = -1, le = -1, replica = 0;
    int has_ls, has_le;
    if ((has_ls = request_query_int(rq, rs, "layer_start", 0, 1 << 20, &ls)) < 0 ||
        (has_le = request_query_int(rq, rs, "layer_end", 1, 1 << 20, &le)) < 0 ||
        request_query_int(rq, rs, "replica", 0, 65535, &replica) < 0)
        return -1;   /* answered */
    if (has_ls != has_le || (has_ls && le <= ls)) {
        err_set(&e, 400, "invalid_field", "layer_end", "layer_start and layer_end go together, with "
                "layer_start < layer_end: the file holds layers layer_start to layer_end - 1");
        goto fail;
    }
    if (ckpt_header_sha256(rq, want, &e) != 0)
        goto fail;
    const char *cl = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || n > (unsigned long long)srv->cfg.max_checkpoint_bytes) {
            err_set(&e, 413, "body_too_large", NULL, "a checkpoint file may be at most %ld bytes",
                    srv->cfg.max_checkpoint_bytes);
            goto fail;
        }
    }
    const char *params[] = { db_param_i64(p_job, job), db_param_i64(p_stage, stage),
                             db_param_i64(p_node, rq->node_id), db_param_i64(p_replica, replica) };
    /* Only the tasklet (stage, replica) of the job's current plan writes
     * its file, and a replica other than 0 only under diloco; the admin
     * only step 0 (checkpoints_initial_open says when). */
    res = db_query_json(srv->db,
        "SELECT json_build_object('total_steps', j.total_steps, 'layers', (j.spec->'model'->>'layers')::int,"
        " 'stages', j.stages, 'model', j.spec->'model',"
        " 'diloco', j.spec->'communication'->>'sync' = 'diloco',"
        " 'assigned', EXISTS (SELECT 1"
        "   FROM assignments a JOIN plans p ON p.id = a.plan_id"
        "   WHERE p.job_id = j.id AND p.epoch = j.plan_epoch AND a.stage = $2::int AND a.replica = $4::int"
        "     AND a.node_id = $3::bigint))"
        " FROM jobs j WHERE j.id = $1::bigint", 4, params, "job", &e);
    if (!res) {
        if (e.status == 404)
            err_set(&e, 404, "not_found", NULL, "job %s does not exist", p_job);
        goto fail;
    }
    if (rq->node_id == 0 && ckpt_begin_admin(srv, res, job, step, stage, replica, &e) != 0)
        goto fail;
    if (rq->node_id != 0 && replica > 0 && !json_is_true(json_object_get(res, "diloco"))) {
        err_set(&e, 422, "invalid_field", "replica", "job %s keeps one checkpoint file a stage, replica 0's; "
                "only sync \"diloco\" keeps one a replica", p_job);
        goto fail;
    }
    if (rq->node_id != 0 && !json_is_true(json_object_get(res, "assigned"))) {
        err_set(&e, 403, "forbidden", NULL, "node %lld is not replica %lld of stage %lld in job %s's current plan; "
                "only that node uploads its checkpoint file", (long long)rq->node_id, replica, (long long)stage,
                p_job);
        goto fail;
    }
    if (rq->node_id != 0 && step == 0) {
        err_set(&e, 422, "invalid_field", "step", "step 0 of job %s is its initial weights, which only the admin "
                "uploads (shoal-agent import), before the job is first scheduled; a node uploads steps from 1",
                p_job);
        goto fail;
    }
    if (step > json_integer_value(json_object_get(res, "total_steps"))) {
        err_set(&e, 422, "invalid_field", "step", "step must be at most job %s's %lld steps", p_job,
                (long long)json_integer_value(json_object_get(res, "total_steps")));
        goto fail;
    }
    if (le > json_integer_value(json_object_get(res, "layers"))) {
        err_set(&e, 422, "invalid_field", "layer_end", "layer_end must be at most job %s's %lld layers", p_job,
                (long long)json_integer_value(json_object_get(res, "layers")));
        goto fail;
    }
    snprintf(dir, sizeof dir, "%s/job%lld", srv->cfg.checkpoint_dir, (long long)job);
    if (ckpt_mkdirs(dir, &e) != 0)
        goto fail;
    u = calloc(1, sizeof *u);
    if (!u || !(u->md = EVP_MD_CTX_new()) || EVP_DigestInit_ex(u->md, EVP_sha256(), NULL) != 1) {
        err_set(&e, 500, "internal", NULL, "out of memory");
        goto fail;
    }
    u->fd = -1;
    u->cap = (uint64_t)srv->cfg.max_checkpoint_bytes;
    u->layer_start = ls;
    u->layer_end = le;
    u->replica = replica;
    u->admin = rq->node_id == 0;
    if (model_json_parse(json_object_get(res, "model"), "model", &u->model, &e) != 0) {
        err_set(&e, 500, "internal", NULL, "job %s has a stored model that no longer parses", p_job);
        goto fail;
    }
    u->stages = json_integer_value(json_object_get(res, "stages"));
    snprintf(u->want_sha256, sizeof u->want_sha256, "%s", want);
    snprintf(u->tmp, sizeof u->tmp, "%s/.upload-XXXXXX", dir);
    u->fd = mkostemp(u->tmp, O_CLOEXEC);
    if (u->fd < 0) {
        err_set(&e, 507, "storage", NULL, "cannot create a file in %s: %s", dir, strerror(errno));
        goto fail;
    }
    rq->upload = u;
    json_decref(res);
    return 0;
fail:
    ckpt_note_failure(srv, job, &e);
    ckpt_upload_free(u);
    json_decref(res);
    reply_error(rs, &e);
    return -1;
}

/* A piece of the body: write it and hash it; past the cap, drop the file. */
static void ckpt_chunk(struct request *rq, const char *data, size_t len)
{
    struct upload *u = rq->upload;
    if (u->too_large || u->write_errno)
        return;
    u->bytes += len;
    if (u->bytes > u->cap) {
        u->too_large = 1;
        close(u->fd);   /* free the disk now; the rest of the body is read and dropped */
        unlink(u->tmp);
        u->fd = -1;
        return;
    }
    EVP_DigestUpdate(u->md, data, len);
    while (len > 0) {
        ssize_t n = write(u->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            u->write_errno = n < 0 ? errno : EIO;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

const struct upload_sink checkpoint_upload = { ckpt_begin, ckpt_chunk, ckpt_abort };

/* Checks the received file's header against the job and the upload: a
 * stage file (kern_stage_file_peek: magic, version, a size its header
 * makes) of the job's model, of the layers the query says, first iff it
 * is stage 0 and last iff it is the job's last stage, and, for initial
 * weights, at AdamW step 0.  Where the query did not say the layers, the
 * header's are recorded.  Returns 0, or -1 with a 422 in e naming what
 * differs. */
static int ckpt_check_stage_file(struct upload *u, int64_t job, int64_t stage, struct shoal_err *e)
{
    struct model_config m;
    struct kern_stage_spec sp;
    struct kern_err ke;
    uint64_t step = 0;
    const struct model_config *want = &u->model;
    FILE *f = fopen(u->tmp, "rb");
    if (!f)
        return err_set(e, 507, "storage", NULL, "cannot read back the uploaded file: %s", strerror(errno));
    int rc = kern_stage_file_peek(f, &m, &sp, &step, &ke);
    fclose(f);
    if (rc != 0)
        return err_set(e, 422, "invalid_field", "body", "the body is not a stage file of shoal's: %s; nothing "
                       "was kept", ke.msg);
    if (!model_config_equal(&m, want)) {
        char a[200], b[200];
        model_config_text(&m, a, sizeof a);
        model_config_text(want, b, sizeof b);
        return err_set(e, 422, "invalid_field", "body", "the file holds a model %s; job %lld trains %s; nothing "
                       "was kept", a, (long long)job, b);
    }
    if (sp.layer_start < 0 || sp.layer_end <= sp.layer_start || sp.layer_end > want->layers)
        return err_set(e, 422, "invalid_field", "body", "the file holds layer_start %d and layer_end %d; job "
                       "%lld's model has layers " LAYER_RANGE_FMT " and a stage holds at least one; nothing was "
                       "kept", sp.layer_start, sp.layer_end, (long long)job, LAYER_RANGE(0, want->layers));
    if (u->layer_start >= 0 && (sp.layer_start != u->layer_start || sp.layer_end != u->layer_end))
        return err_set(e, 422, "invalid_field", "body", "the file holds layers " LAYER_RANGE_FMT "; the query "
                       "says layers " LAYER_RANGE_FMT " (layer_start %lld, layer_end %lld); nothing was kept",
                       LAYER_RANGE(sp.layer_start, sp.layer_end), LAYER_RANGE(u->layer_start, u->layer_end),
                       u->layer_start, u->layer_end);
    int first = stage == 0, last = stage == u->stages - 1;
    if (!!sp.first != first || !!sp.last != last)
        return err_set(e, 422, "invalid_field", "body", "the file is a stage with first=%d last=%d (embeddings, "
                       "head); stage %lld of job %lld's %lld stages is first=%d last=%d; nothing was kept", !!sp.first,
                       !!sp.last, (long long)stage, (long long)job, u->stages, first, last);
    if (u->admin && step != 0)
        return err_set(e, 422, "invalid_field", "body", "the file has taken %llu AdamW steps; initial weights "
                       "are at step 0 (no optimizer state); nothing was kept", (unsigned long long)step);
    u->layer_start = sp.layer_start;
    u->layer_end = sp.layer_end;
    return 0;
}

/* Puts the finished upload (u->tmp) in `dir` under a name no file holds
 * yet, so that no stored file ever changes: `name`.bin, or when that is
 * taken (a re-upload) `name`-<sha256>.bin, which a file of the same name
 * holds only with the same bytes (then it is used as it is).  Writes its
 * stored path (CKPT_REL_PREFIX...) to rel and whether this call made it
 * to *made.  Returns 0, or -1 with a 507 in e. */
static int ckpt_place(struct server *srv, struct upload *u, const char *rel_dir, const char *name,
                      const char *sha256, char *rel, size_t rel_len, int *made, struct shoal_err *e)
{
    char path[CKPT_PATH_MAX];
    *made = 0;
    for (int addressed = 0; addressed < 2; addressed++) {
        int n = addressed ? snprintf(rel, rel_len, "%s/%s-%s.bin", rel_dir, name, sha256)
                          : snprintf(rel, rel_len, "%s/%s.bin", rel_dir, name);
        if (n < 0 || (size_t)n >= rel_len || checkpoints_file(srv, rel, path, sizeof path) != 0)
            return err_set(e, 507, "storage", NULL, "the checkpoint's path is too long");
        if (link(u->tmp, path) == 0) {   /* link, not rename: it never replaces a file */
            *made = 1;
            return 0;
        }
        if (errno != EEXIST)
            return err_set(e, 507, "storage", NULL, "cannot move the checkpoint into place: %s", strerror(errno));
    }
    return 0;   /* these very bytes are stored under that name already */
}

/* Removes the stored file of path `rel`, logging why it is done and a
 * failure. */
static void ckpt_unlink(struct server *srv, const char *rel, const char *why)
{
    char path[CKPT_PATH_MAX];
    if (checkpoints_file(srv, rel, path, sizeof path) != 0 || (unlink(path) != 0 && errno != ENOENT))
        log_error("checkpoint: cannot remove %s (%s): %s", rel, why, strerror(errno));
}

/* Stores the finished upload and records it, under one lock.  A stored
 * file is never replaced or restored: the new bytes go under a name of
 * their own (ckpt_place), the row is pointed at it, and only then is the
 * file the row named before removed.  So whatever fails when, the row
 * names a file that holds the bytes of its SHA-256: a database that
 * refuses the row gets the new file removed (the old row and file stay);
 * one whose answer never came (the row may or may not have changed, and
 * may still change when a stalled commit lands) keeps both files, each
 * whole, and whichever the row names is served.  Returns the row's
 * answer, or NULL with `e` set. */
static json_t *ckpt_commit(struct request *rq, struct upload *u, const char *sha256, struct shoal_err *e)
{
    struct server *srv = rq->srv;
    int64_t job = rq->match.ids[0], step = rq->match.ids[1], stage = rq->match.ids[2];
    char rel[256], rel_dir[64], dir[CKPT_PATH_MAX], name[48];
    char p_job[24], p_step[24], p_stage[24], p_node[24], p_bytes[24], p_ls[24], p_le[24], p_replica[24];
    json_t *res = NULL;
    int made = 0;   /* the file at rel was made by this upload */
    if (fsync(u->fd) != 0) {
        err_set(e, 507, "storage", NULL, "cannot write the checkpoint to disk: %s", strerror(errno));
        return NULL;
    }
    if (u->replica > 0)
        snprintf(name, sizeof name, "stage%lld-replica%lld", (long long)stage, u->replica);
    else
        snprintf(name, sizeof name, "stage%lld", (long long)stage);
    snprintf(rel_dir, sizeof rel_dir, CKPT_REL_PREFIX "job%lld/step%lld", (long long)job, (long long)step);
    snprintf(dir, sizeof dir, "%s/job%lld/step%lld", srv->cfg.checkpoint_dir, (long long)job, (long long)step);
    if (ckpt_mkdirs(dir, e) != 0)
        return NULL;
    pthread_mutex_lock(&ckpt_commit_lock);
    /* a schedule may have come while the initial weights were uploaded */
    if ((u->admin && checkpoints_initial_open(srv, job, e) != 0) ||
        ckpt_place(srv, u, rel_dir, name, sha256, rel, sizeof rel, &made, e) != 0)
        goto out;
    ckpt_upload_free_file(u);
    ckpt_sync_dir(dir);
    const char *params[] = { db_param_i64(p_job, job), db_param_i64(p_step, step), db_param_i64(p_stage, stage),
                             u->admin ? NULL : db_param_i64(p_node, rq->node_id),
                             db_param_i64(p_bytes, (long long)u->bytes),
                             sha256, rel, u->layer_start >= 0 ? db_param_i64(p_ls, u->layer_start) : NULL,
                             u->layer_end >= 0 ? db_param_i64(p_le, u->layer_end) : NULL,
                             db_param_i64(p_replica, u->replica) };
    /* "complete" counts the other files' rows plus this one (the statement
     * does not see its own insert); "replaced" is the path the row named
     * before (the statement's snapshot). */
    res = db_query_json(srv->db,
        "WITH before AS (SELECT path FROM checkpoints WHERE job_id = $1::bigint AND step = $2::bigint"
        "   AND stage = $3::int AND replica = $10::int),"
        " up AS (INSERT INTO checkpoints (job_id, step, stage, node_id, bytes, sha256, path, layer_start,"
        "     layer_end, replica)"
        "   VALUES ($1::bigint, $2::bigint, $3::int, $4::bigint, $5::bigint, $6, $7, $8::int, $9::int, $10::int)"
        "   ON CONFLICT (job_id, step, stage, replica) DO UPDATE SET node_id = EXCLUDED.node_id,"
        "     bytes = EXCLUDED.bytes, sha256 = EXCLUDED.sha256, path = EXCLUDED.path,"
        "     layer_start = EXCLUDED.layer_start, layer_end = EXCLUDED.layer_end, created_at = now()"
        "   RETURNING stage, replica),"
        /* the store's failure healed by any file stored, a node's disk only by that node's */
        " healed AS (UPDATE jobs SET checkpoint_error = NULL, checkpoint_error_node = NULL WHERE id = $1::bigint"
        "   AND checkpoint_error IS NOT NULL"
        "   AND (checkpoint_error_node IS NULL OR checkpoint_error_node = $4::bigint) RETURNING 1),"
        " node_healed AS (UPDATE nodes SET upload_error = NULL WHERE id = $4::bigint AND upload_error IS NOT NULL"
        "   RETURNING 1)"
        " SELECT json_build_object('job_id', j.id, 'step', $2::bigint, 'stage', (SELECT stage FROM up),"
        "   'replica', (SELECT replica FROM up), 'bytes', $5::bigint, 'sha256', $6::text,"
        "   'complete', 1 + (SELECT count(*) FROM checkpoints c WHERE c.job_id = j.id AND c.step = $2::bigint"
        "     AND c.stage < j.stages AND c.replica < " CKPT_FILES_AT_SQL("$2::bigint")
        "     AND (c.stage, c.replica) <> ($3::int, $10::int)) >= j.stages * " CKPT_FILES_AT_SQL("$2::bigint") ","
        "   'replaced', (SELECT path FROM before))"
        " FROM jobs j WHERE j.id = $1::bigint", 10, params, "job", e);
    if (res) {
        const char *replaced = json_string_value(json_object_get(res, "replaced"));
        if (replaced && strcmp(replaced, rel) != 0)
            ckpt_unlink(srv, replaced, "the file a re-upload replaced");
        json_object_del(res, "replaced");
    } else if (made && strcmp(e->code, "database_unavailable") != 0) {
        ckpt_unlink(srv, rel, "an upload the database refused");
        ckpt_sync_dir(dir);
    } else if (made) {
        log_warn("checkpoint job=%lld step=%lld stage=%lld: the database may or may not have recorded %s; "
                 "it is kept, and so is the file it would replace", (long long)job, (long long)step,
                 (long long)stage, rel);
    }
out:
    pthread_mutex_unlock(&ckpt_commit_lock);
    return res;
}

void h_checkpoint_put(struct request *rq, struct response *rs)
{
    struct upload *u = rq->upload;
    struct shoal_err e;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    char sha256[TOKEN_HASH_HEX];
    rq->upload = NULL;   /* ours from here on */
    if (!u) {
        reply_fail(rs, 500, "internal", NULL, "the upload was not started");
        return;
    }
    if (u->too_large) {
        reply_fail(rs, 413, "body_too_large", NULL, "a checkpoint file may be at most %llu bytes",
                   (unsigned long long)u->cap);
        goto out;
    }
    if (u->write_errno) {
        err_set(&e, 507, "storage", NULL, "cannot write the checkpoint: %s", strerror(u->write_errno));
        ckpt_note_failure(rq->srv, rq->match.ids[0], &e);
        reply_error(rs, &e);
        goto out;
    }
    if (EVP_DigestFinal_ex(u->md, digest, &dlen) != 1 || dlen != 32) {
        reply_fail(rs, 500, "internal", NULL, "cannot compute the checksum");
        goto out;
    }
    for (unsigned i = 0; i < dlen; i++)
        snprintf(sha256 + 2 * i, 3, "%02x", digest[i]);
    if (u->want_sha256[0] && strcmp(u->want_sha256, sha256) != 0) {
        reply_fail(rs, 422, "checksum_mismatch", CKPT_SHA256_HEADER,
                   "the body's SHA-256 is %s, not the %s header's %s; nothing was kept", sha256,
                   CKPT_SHA256_HEADER, u->want_sha256);
        goto out;
    }
    if (ckpt_check_stage_file(u, rq->match.ids[0], rq->match.ids[2], &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    json_t *res = ckpt_commit(rq, u, sha256, &e);
    if (!res) {
        ckpt_note_failure(rq->srv, rq->match.ids[0], &e);
        reply_error(rs, &e);
        goto out;
    }
    log_info("checkpoint stored job=%lld step=%lld stage=%lld replica=%lld bytes=%llu", (long long)rq->match.ids[0],
             (long long)rq->match.ids[1], (long long)rq->match.ids[2], u->replica, (unsigned long long)u->bytes);
    if (json_is_true(json_object_get(res, "complete"))) {
        checkpoints_job_done(rq->srv, rq->match.ids[0]);
        checkpoints_retire(rq->srv, rq->match.ids[0]);
    }
    reply_json(rs, 201, res);
out:
    ckpt_upload_free(u);
}

void h_checkpoints_list(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    char p_id[24], what[40];
    const char *params[] = { db_param_i64(p_id, rq->match.ids[0]) };
    snprintf(what, sizeof what, "job %s", p_id);
    json_t *res = db_query_json(rq->srv->db,
        "SELECT json_build_object('checkpoints', coalesce((SELECT json_agg(json_build_object('step', s.step,"
        "   'stages', s.stages, 'complete', s.n >= j.stages * " CKPT_FILES_AT_SQL("s.step") ") ORDER BY s.step DESC)"
        "  FROM (SELECT step, count(*) FILTER (WHERE c.stage < j.stages AND c.replica < " CKPT_FILES_AT_SQL("c.step")
        "     ) AS n, json_agg(json_build_object('stage', stage, 'replica', replica, 'bytes', bytes,"
        "     'sha256', sha256, 'node_id', node_id, 'layer_start', layer_start, 'layer_end', layer_end,"
        "     'created_at', created_at) ORDER BY stage, replica) AS stages"
        "   FROM checkpoints c WHERE c.job_id = j.id GROUP BY step) s), '[]'))"
        " FROM jobs j WHERE j.id = $1::bigint", 1, params, what, &e);
    if (res)
        reply_json(rs, 200, res);
    else
        reply_error(rs, &e);
}

void h_checkpoint_get(struct request *rq, struct response *rs)
{
    struct server *srv = rq->srv;
    struct shoal_err e;
    char p_job[24], p_step[24], p_stage[24], p_node[24], p_replica[24], path[CKPT_PATH_MAX];
    struct stat st;
    long long replica = 0;
    int fd = -1;
    if (request_query_int(rq, rs, "replica", 0, 65535, &replica) < 0)
        return;   /* answered */
    const char *params[] = { db_param_i64(p_job, rq->match.ids[0]), db_param_i64(p_step, rq->match.ids[1]),
                             db_param_i64(p_stage, rq->match.ids[2]), db_param_i64(p_node, rq->node_id),
                             db_param_i64(p_replica, replica) };
    /* The admin (node 0), a node the job ever planned, or a node of a job
     * that resumes from this one may read it. */
    json_t *res = db_query_json(srv->db,
        "SELECT json_build_object('allowed', $4::bigint = 0 OR EXISTS (SELECT 1 FROM assignments a"
        "   JOIN plans p ON p.id = a.plan_id JOIN jobs j ON j.id = p.job_id"
        "   WHERE a.node_id = $4::bigint AND (j.id = $1::bigint"
        "     OR (jsonb_typeof(j.spec->'resume_from') = 'object' AND j.spec->'resume_from'->>'job_id' = $1::text))),"
        "  'file', (SELECT json_build_object('bytes', c.bytes, 'sha256', c.sha256, 'path', c.path)"
        "   FROM checkpoints c WHERE c.job_id = $1::bigint AND c.step = $2::bigint AND c.stage = $3::int"
        "     AND c.replica = $5::int))",
        5, params, "checkpoint", &e);
    if (!res) {
        reply_error(rs, &e);
        return;
    }
    json_t *file = json_object_get(res, "file");
    if (!json_is_true(json_object_get(res, "allowed"))) {
        reply_fail(rs, 403, "forbidden", NULL, "node %s has no part in job %s", p_node, p_job);
    } else if (!json_is_object(file)) {
        reply_fail(rs, 404, "not_found", NULL, "job %s has no checkpoint of stage %s (replica %s) at step %s", p_job,
                   p_stage, p_replica, p_step);
    } else {
        if (checkpoints_file(srv, json_string_value(json_object_get(file, "path")), path, sizeof path) == 0)
            fd = open(path, O_RDONLY | O_CLOEXEC);
        else
            errno = ENAMETOOLONG;
        if (fd < 0 || fstat(fd, &st) != 0 || st.st_size != json_integer_value(json_object_get(file, "bytes"))) {
            log_error("checkpoint file missing or damaged path=%s: %s", path, fd < 0 ? strerror(errno) : "size differs");
            reply_fail(rs, 404, "not_found", NULL, "the checkpoint of job %s stage %s at step %s is recorded but its "
                       "file is not on this server", p_job, p_stage, p_step);
            if (fd >= 0)
                close(fd);
        } else {
            reply_file(rs, 200, fd, (uint64_t)st.st_size, "application/octet-stream");
            rs->header_name = CKPT_SHA256_HEADER;
            snprintf(rs->header_value, sizeof rs->header_value, "%s",
                     json_string_value(json_object_get(file, "sha256")));
        }
    }
    json_decref(res);
}
