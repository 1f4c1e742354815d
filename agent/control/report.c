/* report.c - the progress queue and its sending thread (report.h). */
#include "report.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/log.h"

/* One POST of a JSON body, or one PUT of a file (file != NULL). */
struct pending {
    char path[128];
    json_t *body;
    char *file;                 /* owned: removed when the entry goes */
    char sha256[65];
    char key[48];               /* a file upload's supersede key */
    int replaced;               /* a newer upload took its place: skip it */
};

/* One queue and the thread that sends it: posts in one lane, file uploads
 * in the other, so progress never waits behind a checkpoint upload (a big
 * file on a slow link, or a server whose store is failing). */
struct lane {
    struct reporter *r;
    pthread_t thread;
    struct pending *ring;       /* circular queue */
    int cap, head, count;
    int sending;                /* the thread holds an entry it has not finished */
    int started;
};

#define LANE_POSTS 0
#define LANE_FILES 1
#define LANES 2

struct reporter {
    struct ctl ctl;             /* a copy whose stop flag is ours */
    atomic_int stop;
    pthread_mutex_t mu;         /* guards the lanes and what follows */
    pthread_cond_t changed;
    struct lane lanes[LANES];
    int stopping;
    struct shoal_err refused;   /* the latest refusal since the last flush */
    int has_refused;
};

static void pending_free(struct pending *p)
{
    json_decref(p->body);
    if (p->file) {
        unlink(p->file);
        free(p->file);
    }
}

static void *report_thread(void *arg)
{
    struct lane *l = arg;
    struct reporter *r = l->r;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stopping && l->count == 0)
            pthread_cond_wait(&r->changed, &r->mu);
        if (r->stopping)
            break;
        struct pending p = l->ring[l->head];
        l->sending = 1;
        pthread_mutex_unlock(&r->mu);
        struct shoal_err e;
        int rc = 0;
        /* deadline 0: until it is answered or we are told to stop */
        if (p.replaced)
            rc = 0;
        else if (p.file)
            rc = ctl_put_file(&r->ctl, p.path, p.file, p.sha256, 0, NULL, &e);
        else
            rc = ctl_call_retry(&r->ctl, "POST", p.path, p.body, 30, 0, NULL, &e);
        pthread_mutex_lock(&r->mu);
        if (rc != 0 && !r->stopping) {
            log_warn("%s refused path=%s reason=\"%s\"", p.file ? "checkpoint upload" : "progress post", p.path,
                     e.message);
            r->refused = e;
            r->has_refused = 1;
        }
        pending_free(&p);
        l->head = (l->head + 1) % l->cap;
        l->count--;
        l->sending = 0;
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Stops and joins the lanes' threads that run, frees every queue and `r`. */
static void report_free(struct reporter *r)
{
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    atomic_store(&r->stop, 1);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    for (int k = 0; k < LANES; k++) {
        struct lane *l = &r->lanes[k];
        if (l->started)
            pthread_join(l->thread, NULL);
        for (int i = 0; l->ring && i < l->count; i++)
            pending_free(&l->ring[(l->head + i) % l->cap]);
        free(l->ring);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->changed);
    free(r);
}

int report_start(const struct ctl *ctl, int max_pending, struct reporter **out, struct shoal_err *err)
{
    struct reporter *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, 500, "internal", NULL, "out of memory");
    r->ctl = *ctl;
    r->ctl.stop = &r->stop;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->changed, NULL);
    for (int k = 0; k < LANES; k++) {
        struct lane *l = &r->lanes[k];
        l->r = r;
        l->cap = max_pending;
        if (!(l->ring = calloc((size_t)max_pending, sizeof *l->ring))) {
            report_free(r);
            return err_set(err, 500, "internal", NULL, "out of memory");
        }
        if (pthread_create(&l->thread, NULL, report_thread, l) != 0) {
            report_free(r);
            return err_set(err, 500, "internal", NULL, "cannot start the progress threads");
        }
        l->started = 1;
    }
    *out = r;
    return 0;
}

/* Appends `in` (taken over) to its lane once there is room; frees it if
 * stopping.  A file upload that finds REPORT_WAITING_PER_KEY uploads with
 * its key waiting first marks the oldest of them replaced. */
static void report_enqueue(struct reporter *r, struct pending *in)
{
    struct lane *l = &r->lanes[in->file ? LANE_FILES : LANE_POSTS];
    pthread_mutex_lock(&r->mu);
    while (l->count == l->cap && !r->stopping)
        pthread_cond_wait(&r->changed, &r->mu);
    if (r->stopping) {
        pthread_mutex_unlock(&r->mu);
        pending_free(in);
        return;
    }
    struct pending *oldest = NULL;
    int waiting = 0;
    for (int i = l->sending; in->file && i < l->count; i++) {
        struct pending *q = &l->ring[(l->head + i) % l->cap];
        if (!q->replaced && strcmp(q->key, in->key) == 0) {
            oldest = oldest ? oldest : q;
            waiting++;
        }
    }
    if (waiting >= REPORT_WAITING_PER_KEY) {
        log_info("checkpoint upload path=%s replaced by path=%s before it was sent", oldest->path, in->path);
        oldest->replaced = 1;
    }
    l->ring[(l->head + l->count) % l->cap] = *in;
    l->count++;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
}

void report_post(struct reporter *r, const char *path, json_t *body)
{
    struct pending p = { .body = body };
    snprintf(p.path, sizeof p.path, "%s", path);
    report_enqueue(r, &p);
}

void report_put_file(struct reporter *r, const char *path, const char *file, const char *sha256,
                     const char *supersede_key)
{
    struct pending p = { .file = strdup(file) };
    if (!p.file) {
        log_error("out of memory queueing checkpoint upload path=%s", path);
        unlink(file);
        return;
    }
    snprintf(p.path, sizeof p.path, "%s", path);
    snprintf(p.sha256, sizeof p.sha256, "%s", sha256);
    snprintf(p.key, sizeof p.key, "%s", supersede_key);
    report_enqueue(r, &p);
}

int report_flush(struct reporter *r, double timeout_s, const atomic_int *stop, struct shoal_err *err)
{
    int rc = 0;
    double until = ctl_now() + timeout_s;
    pthread_mutex_lock(&r->mu);
    int left = r->lanes[LANE_POSTS].count + r->lanes[LANE_FILES].count;
    while (left > 0 && ctl_now() < until && !(stop && atomic_load(stop))) {
        struct timespec ts = ctl_abstime(0.1);
        pthread_cond_timedwait(&r->changed, &r->mu, &ts);
        left = r->lanes[LANE_POSTS].count + r->lanes[LANE_FILES].count;
    }
    if (left > 0 && stop && atomic_load(stop))
        rc = err_set(err, 409, "stopped", NULL, "%d progress reports and %d checkpoint uploads not waited for: "
                     "they go on in the background", r->lanes[LANE_POSTS].count, r->lanes[LANE_FILES].count);
    else if (left > 0)
        rc = err_set(err, 503, "server_unreachable", NULL, "%d progress reports and %d checkpoint uploads could "
                     "not be delivered in %.0f s", r->lanes[LANE_POSTS].count, r->lanes[LANE_FILES].count,
                     timeout_s);
    else if (r->has_refused) {
        *err = r->refused;
        r->has_refused = 0;
        rc = -1;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void report_stop(struct reporter *r)
{
    if (r)
        report_free(r);
}
