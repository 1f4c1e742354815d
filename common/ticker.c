/* ticker.c - the periodic worker thread (ticker.h). */
#include "ticker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ticker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* CLOCK_MONOTONIC */
    double period_s;
    void (*job)(struct ticker *t, void *arg);
    void *arg;
    int stop;                   /* under mu */
    int woken;                  /* under mu: ticker_wake since the job last began */
};

static void *ticker_main(void *p)
{
    struct ticker *t = p;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        t->woken = 0;
        pthread_mutex_unlock(&t->mu);
        t->job(t, t->arg);
        pthread_mutex_lock(&t->mu);
        if (t->stop || t->woken)
            continue;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        double s = (double)until.tv_sec + (double)until.tv_nsec * 1e-9 + t->period_s;
        until.tv_sec = (time_t)s;
        until.tv_nsec = (long)((s - (double)until.tv_sec) * 1e9);
        while (!t->stop && !t->woken && pthread_cond_timedwait(&t->wake, &t->mu, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

struct ticker *ticker_start(const char *name, double period_s, void (*job)(struct ticker *t, void *arg), void *arg,
                            struct shoal_err *err)
{
    struct ticker *t = calloc(1, sizeof *t);
    pthread_condattr_t ca;
    if (!t) {
        err_set(err, 1, "oom", NULL, "out of memory starting %s", name);
        return NULL;
    }
    t->period_s = period_s > 0 ? period_s : 1.0;
    t->job = job;
    t->arg = arg;
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&t->thread, NULL, ticker_main, t);
    if (rc != 0) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->wake);
        free(t);
        err_set(err, 1, "thread", NULL, "cannot start %s: %s", name, strerror(rc));
        return NULL;
    }
    return t;
}

void ticker_wake(struct ticker *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->woken = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
}

int ticker_stopping(struct ticker *t)
{
    pthread_mutex_lock(&t->mu);
    int stop = t->stop;
    pthread_mutex_unlock(&t->mu);
    return stop;
}

void ticker_stop(struct ticker *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->wake);
    free(t);
}
