/* report.c - the progress queue and its sending thread (report.h). */
#include "report.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"

struct pending {
    char path[128];
    json_t *body;
};

struct reporter {
    struct ctl ctl;             /* a copy whose stop flag is ours */
    atomic_int stop;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    struct pending *ring;       /* circular queue */
    int cap, head, count;
    int sending;                /* the thread holds an entry it has not finished */
    int stopping;
    struct shoal_err refused;   /* the latest refusal since the last flush */
    int has_refused;
};

static void *report_thread(void *arg)
{
    struct reporter *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stopping && r->count == 0)
            pthread_cond_wait(&r->changed, &r->mu);
        if (r->stopping)
            break;
        struct pending p = r->ring[r->head];
        r->sending = 1;
        pthread_mutex_unlock(&r->mu);
        struct shoal_err e;
        /* deadline 0: until it is answered or we are told to stop */
        int rc = ctl_call_retry(&r->ctl, "POST", p.path, p.body, 30, 0, NULL, &e);
        pthread_mutex_lock(&r->mu);
        if (rc != 0 && !r->stopping) {
            log_warn("progress post refused path=%s reason=\"%s\"", p.path, e.message);
            r->refused = e;
            r->has_refused = 1;
        }
        json_decref(p.body);
        r->head = (r->head + 1) % r->cap;
        r->count--;
        r->sending = 0;
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int report_start(const struct ctl *ctl, int max_pending, struct reporter **out, struct shoal_err *err)
{
    struct reporter *r = calloc(1, sizeof *r);
    if (!r || !(r->ring = calloc((size_t)max_pending, sizeof *r->ring))) {
        free(r);
        return err_set(err, 500, "internal", NULL, "out of memory");
    }
    r->ctl = *ctl;
    r->ctl.stop = &r->stop;
    r->cap = max_pending;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->changed, NULL);
    if (pthread_create(&r->thread, NULL, report_thread, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->changed);
        free(r->ring);
        free(r);
        return err_set(err, 500, "internal", NULL, "cannot start the progress thread");
    }
    *out = r;
    return 0;
}

void report_post(struct reporter *r, const char *path, json_t *body)
{
    pthread_mutex_lock(&r->mu);
    while (r->count == r->cap && !r->stopping)
        pthread_cond_wait(&r->changed, &r->mu);
    if (r->stopping) {
        pthread_mutex_unlock(&r->mu);
        json_decref(body);
        return;
    }
    struct pending *p = &r->ring[(r->head + r->count) % r->cap];
    snprintf(p->path, sizeof p->path, "%s", path);
    p->body = body;
    r->count++;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
}

int report_flush(struct reporter *r, double timeout_s, struct shoal_err *err)
{
    int rc = 0;
    double until = ctl_now() + timeout_s;
    pthread_mutex_lock(&r->mu);
    while (r->count > 0 && ctl_now() < until) {
        struct timespec ts = ctl_abstime(0.1);
        pthread_cond_timedwait(&r->changed, &r->mu, &ts);
    }
    if (r->count > 0)
        rc = err_set(err, 503, "server_unreachable", NULL, "%d progress reports could not be delivered in %.0f s",
                     r->count, timeout_s);
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
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    atomic_store(&r->stop, 1);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    for (int i = 0; i < r->count; i++)
        json_decref(r->ring[(r->head + i) % r->cap].body);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->changed);
    free(r->ring);
    free(r);
}
