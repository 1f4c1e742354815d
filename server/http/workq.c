/* workq.c - queued items run by a fixed set of threads (workq.h). */
#include "workq.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "../../common/clock.h"

struct workq {
    pthread_mutex_t mu;
    pthread_cond_t changed;       /* an item queued, or stopping */
    void **items;                 /* circular, cap slots */
    double *arrived;              /* monotonic s, per slot */
    int cap, head, count;
    int threads, started, running, stopping;
    long refused, late;
    double max_wait_s;
    workq_fn fn;
    void *ctx;
    pthread_t *workers;           /* threads workers, then the keeper */
};

/* Takes the oldest item; the lock is held and count > 0. */
static void *workq_pop_locked(struct workq *q)
{
    void *item = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    return item;
}

static void *workq_worker(void *arg)
{
    struct workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stopping && q->count == 0)
            pthread_cond_wait(&q->changed, &q->mu);
        if (q->stopping)
            break;   /* what is left goes out late, from the keeper */
        void *item = workq_pop_locked(q);
        q->running++;
        pthread_mutex_unlock(&q->mu);
        q->fn(item, 0, q->ctx);
        pthread_mutex_lock(&q->mu);
        q->running--;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Hands out, late, every item that has waited its limit, sleeping until
 * the oldest one would; all of them once stopping. */
static void *workq_keeper(void *arg)
{
    struct workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        if (q->count > 0 && (q->stopping || mono_s() - q->arrived[q->head] >= q->max_wait_s)) {
            void *item = workq_pop_locked(q);
            q->late++;
            pthread_mutex_unlock(&q->mu);
            q->fn(item, 1, q->ctx);
            pthread_mutex_lock(&q->mu);
            continue;
        }
        if (q->stopping)
            break;
        if (q->count == 0) {
            pthread_cond_wait(&q->changed, &q->mu);
            continue;
        }
        double at = q->arrived[q->head] + q->max_wait_s - mono_s();   /* s until the oldest is late */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double end = (double)ts.tv_nsec / 1e9 + (at > 0 ? at : 0);
        ts.tv_sec += (time_t)end;
        ts.tv_nsec = (long)((end - (double)(time_t)end) * 1e9);
        pthread_cond_timedwait(&q->changed, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

struct workq *workq_start(const char *name, int threads, int cap, double max_wait_s, workq_fn fn, void *ctx,
                          struct shoal_err *err)
{
    struct workq *q = calloc(1, sizeof *q);
    if (!q || threads < 1 || cap < 1 || !(q->items = calloc((size_t)cap, sizeof *q->items)) ||
        !(q->arrived = calloc((size_t)cap, sizeof *q->arrived)) ||
        !(q->workers = calloc((size_t)threads + 1, sizeof *q->workers))) {
        if (q) {
            free(q->items);
            free(q->arrived);
        }
        free(q);
        err_set(err, 1, "oom", NULL, "out of memory for the %s queue", name);
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->changed, NULL);
    q->cap = cap;
    q->threads = threads;
    q->max_wait_s = max_wait_s;
    q->fn = fn;
    q->ctx = ctx;
    for (; q->started <= threads; q->started++) {
        void *(*main_fn)(void *) = q->started < threads ? workq_worker : workq_keeper;
        if (pthread_create(&q->workers[q->started], NULL, main_fn, q) != 0) {
            err_set(err, 1, "threads", NULL, "cannot start the %s queue's threads", name);
            workq_stop(q);
            return NULL;
        }
    }
    return q;
}

int workq_submit(struct workq *q, void *item)
{
    int rc = -1;
    pthread_mutex_lock(&q->mu);
    if (!q->stopping && q->count < q->cap) {
        int tail = (q->head + q->count) % q->cap;
        q->items[tail] = item;
        q->arrived[tail] = mono_s();
        q->count++;
        rc = 0;
        pthread_cond_broadcast(&q->changed);
    } else {
        q->refused++;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void workq_counts(struct workq *q, struct workq_counts *out)
{
    pthread_mutex_lock(&q->mu);
    *out = (struct workq_counts){ .waiting = q->count, .running = q->running, .threads = q->threads,
                                  .refused = q->refused, .late = q->late };
    pthread_mutex_unlock(&q->mu);
}

void workq_stop(struct workq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stopping = 1;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->started; i++)
        pthread_join(q->workers[i], NULL);
    while (q->count > 0)   /* the keeper never started */
        q->fn(workq_pop_locked(q), 1, q->ctx);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->changed);
    free(q->items);
    free(q->arrived);
    free(q->workers);
    free(q);
}
