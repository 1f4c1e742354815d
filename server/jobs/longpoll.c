#include "longpoll.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../../common/log.h"
#include "assignment.h"
#include "../store/db.h"

#define LONGPOLL_RECONNECT_S 1.0    /* s between attempts to reopen the listener connection */
#define LONGPOLL_STOP_WAIT_S 10     /* s longpoll_stop waits for requests still being parked */

struct waiter {
    struct longpoll *lp;
    struct request *rq;         /* set once its connection is suspended */
    int64_t node_id;
    int64_t job_id, epoch;      /* what the node knows; job 0: no assignment */
    int recovering;             /* and whether that job was recovering */
    double deadline;            /* monotonic s */
    unsigned long seq;          /* longpoll_seq before the handler's query */
    int recheck;                /* re-read at the next sweep */
    json_t *answer;             /* set when it is done: what to send (NULL: an error) */
    struct shoal_err err;       /* what to send when answer is NULL */
    struct waiter *prev, *next;
};

struct longpoll {
    char *conninfo;
    long max_waiters;
    struct assignment_tickets tickets;   /* what the answers' relay tickets are signed with */
    pthread_mutex_t lock;       /* guards everything below up to `seq` */
    pthread_cond_t idle;        /* signalled whenever `reserved` drops */
    struct waiter *head;        /* parked waiters, newest first */
    long reserved;              /* waiters admitted: parked, or being parked */
    int closing;
    int pending;                /* some waiter has recheck set */
    atomic_ulong seq;           /* notifications seen, and reconnects */
    atomic_int listening;
    int wake[2];                /* a byte in the pipe wakes the thread */
    pthread_t thread;
    /* the thread's own */
    PGconn *conn;
    double next_connect;        /* monotonic s */
    int down_logged;
};

static void longpoll_wake(struct longpoll *lp)
{
    char b = 1;
    ssize_t n = write(lp->wake[1], &b, 1);   /* a full pipe already means "wake up" */
    (void)n;
}

/* Marks for re-reading the waiters a change to `job` may concern: those
 * that know of that job and those that know of none (-1: every waiter). */
static void longpoll_mark(struct longpoll *lp, long long job)
{
    pthread_mutex_lock(&lp->lock);
    for (struct waiter *w = lp->head; w; w = w->next) {
        if (job < 0 || w->job_id == 0 || w->job_id == job) {
            w->recheck = 1;
            lp->pending = 1;
        }
    }
    pthread_mutex_unlock(&lp->lock);
}

/* Opens the listener connection and LISTENs, at most once a second. */
static void longpoll_connect(struct longpoll *lp)
{
    struct shoal_err e;
    PGresult *r = NULL;
    double now = http_now();
    if (now < lp->next_connect)
        return;
    lp->next_connect = now + LONGPOLL_RECONNECT_S;
    /* db_connect's connect is bounded, so an unreachable host cannot hold
     * up the deadlines of those waiting for long, and its keepalives find a
     * listener whose host vanished silently (it would otherwise wait for
     * notifications that never come). */
    lp->conn = db_connect(lp->conninfo);
    if (!lp->conn || PQstatus(lp->conn) != CONNECTION_OK ||
        !(r = db_exec(lp->conn, "LISTEN shoal_assignment", 0, NULL, &e))) {
        if (!lp->down_logged) {
            const char *why = lp->conn ? PQerrorMessage(lp->conn) : "out of memory";
            log_warn("assignment listener cannot connect, retrying every %.0f s: %.*s", LONGPOLL_RECONNECT_S,
                     (int)strcspn(why, "\n"), why);
            lp->down_logged = 1;
        }
        PQfinish(lp->conn);
        lp->conn = NULL;
        return;
    }
    PQclear(r);
    lp->down_logged = 0;
    atomic_store(&lp->listening, 1);
    atomic_fetch_add(&lp->seq, 1);
    longpoll_mark(lp, -1);   /* notifications may have been sent while it was down */
    log_info("assignment listener up channel=shoal_assignment");
}

static void longpoll_disconnect(struct longpoll *lp, const char *why)
{
    log_warn("assignment listener lost: %.*s", (int)strcspn(why, "\n"), why);
    PQfinish(lp->conn);
    lp->conn = NULL;
    lp->next_connect = 0;   /* try again at once */
    atomic_store(&lp->listening, 0);
}

/* Reads what the server sent and marks the waiters each notification
 * concerns.  Drops the connection if it is broken. */
static void longpoll_notifications(struct longpoll *lp)
{
    if (!PQconsumeInput(lp->conn) || PQstatus(lp->conn) != CONNECTION_OK) {
        longpoll_disconnect(lp, PQerrorMessage(lp->conn));
        return;
    }
    PGnotify *n;
    while ((n = PQnotifies(lp->conn)) != NULL) {
        char *end;
        errno = 0;
        long long job = strtoll(n->extra, &end, 10);
        if (errno || end == n->extra || *end || job < 1)
            job = -1;   /* not a job id: re-read everyone */
        atomic_fetch_add(&lp->seq, 1);
        longpoll_mark(lp, job);
        PQfreemem(n);
    }
}

/* Sends a finished waiter's answer and lets it go. */
static void longpoll_finish(struct longpoll *lp, struct waiter *w)
{
    if (w->answer) {
        request_resume(w->rq, 200, w->answer);
    } else {
        json_t *e = json_pack("{s:{s:s, s:s}}", "error", "code", w->err.code, "message", w->err.message);
        request_resume(w->rq, w->err.status >= 400 ? w->err.status : 500, e);
    }
    free(w);
    pthread_mutex_lock(&lp->lock);
    lp->reserved--;
    pthread_cond_broadcast(&lp->idle);
    pthread_mutex_unlock(&lp->lock);
}

static void longpoll_unlink(struct longpoll *lp, struct waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        lp->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

/* Re-reads the waiters that are due (marked, or out of time; `all`: every
 * one) in one query and answers those whose assignment changed or whose
 * time is up.  Only this thread removes waiters, so those collected stay
 * valid while the lock is released for the query. */
static void longpoll_sweep(struct longpoll *lp, int all)
{
    struct waiter **due = NULL, *done = NULL;
    struct assignment_answer *ans = NULL;
    int64_t *ids = NULL;
    struct shoal_err e;
    int n = 0, ok = 0;
    double now = http_now();

    pthread_mutex_lock(&lp->lock);
    lp->pending = 0;
    long cap = lp->reserved;
    due = cap > 0 ? malloc((size_t)cap * sizeof *due) : NULL;
    for (struct waiter *w = lp->head; w && n < cap && due; w = w->next) {
        if (all || w->recheck || w->deadline <= now) {
            w->recheck = 0;
            due[n++] = w;
        }
    }
    pthread_mutex_unlock(&lp->lock);
    if (n == 0)
        goto out;
    ids = malloc((size_t)n * sizeof *ids);
    ans = calloc((size_t)n, sizeof *ans);
    if (!ids || !ans) {
        err_set(&e, 500, "internal", NULL, "out of memory");
    } else if (!lp->conn) {
        err_set(&e, 503, "database_unavailable", NULL, "the database is unavailable; retry later");
    } else {
        for (int i = 0; i < n; i++)
            ids[i] = due[i]->node_id;
        ok = assignment_query(lp->conn, ids, n, &lp->tickets, ans, &e) == 0;
        if (!ok)
            log_warn("assignment long-poll query failed waiters=%d: %s", n, e.message);
        /* Notifications that came in during the query are queued in libpq. */
        longpoll_notifications(lp);
    }

    pthread_mutex_lock(&lp->lock);
    for (int i = 0; i < n; i++) {
        struct waiter *w = due[i];
        int expired = all || w->deadline <= now;
        int changed = ok && (ans[i].job_id != w->job_id || ans[i].epoch != w->epoch ||
                             ans[i].recovering != w->recovering);
        if (!expired && !changed)
            continue;   /* a failed query leaves it to its deadline or the reconnect */
        longpoll_unlink(lp, w);
        if (ok) {
            w->answer = ans[i].body;
            ans[i].body = NULL;
        } else {
            w->err = e;
        }
        w->next = done;
        done = w;
    }
    pthread_mutex_unlock(&lp->lock);
    while (done) {
        struct waiter *w = done;
        done = w->next;
        longpoll_finish(lp, w);
    }
out:
    if (ok)
        for (int i = 0; i < n; i++)
            json_decref(ans[i].body);
    free(ans);
    free(ids);
    free(due);
}

static void *longpoll_main(void *arg)
{
    struct longpoll *lp = arg;
    for (;;) {
        pthread_mutex_lock(&lp->lock);
        int closing = lp->closing, pending = lp->pending;
        pthread_mutex_unlock(&lp->lock);
        if (closing)
            break;
        if (!lp->conn)
            longpoll_connect(lp);
        struct pollfd p[2] = { { lp->wake[0], POLLIN, 0 }, { lp->conn ? PQsocket(lp->conn) : -1, POLLIN, 0 } };
        if (poll(p, 2, pending ? 0 : (int)(LONGPOLL_TICK_S * 1000)) > 0) {
            char drain[64];
            if (p[0].revents)
                while (read(lp->wake[0], drain, sizeof drain) > 0)
                    ;
            if (p[1].revents && lp->conn)
                longpoll_notifications(lp);
        }
        longpoll_sweep(lp, 0);
    }
    longpoll_sweep(lp, 1);   /* stopping: everyone gets the assignment as it is now */
    PQfinish(lp->conn);
    lp->conn = NULL;
    atomic_store(&lp->listening, 0);
    return NULL;
}

struct longpoll *longpoll_start(const char *conninfo, long max_waiters, const struct assignment_tickets *tickets,
                                struct shoal_err *err)
{
    struct longpoll *lp = calloc(1, sizeof *lp);
    if (!lp || !(lp->conninfo = strdup(conninfo))) {
        free(lp);
        err_set(err, 1, "oom", NULL, "out of memory");
        return NULL;
    }
    lp->max_waiters = max_waiters;
    lp->tickets = *tickets;
    pthread_mutex_init(&lp->lock, NULL);
    pthread_cond_init(&lp->idle, NULL);
    if (pipe2(lp->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        err_set(err, 1, "longpoll", NULL, "cannot make a pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&lp->thread, NULL, longpoll_main, lp) != 0) {
        err_set(err, 1, "longpoll", NULL, "cannot start the assignment listener thread");
        close(lp->wake[0]);
        close(lp->wake[1]);
        goto fail;
    }
    return lp;
fail:
    pthread_mutex_destroy(&lp->lock);
    pthread_cond_destroy(&lp->idle);
    free(lp->conninfo);
    free(lp);
    return NULL;
}

unsigned long longpoll_seq(struct longpoll *lp)
{
    return atomic_load(&lp->seq);
}

/* request_suspend's callback: the connection is suspended, so the waiter
 * may now be answered by the thread (or at once, if stopping). */
static void longpoll_enter(struct request *rq, void *arg)
{
    struct waiter *w = arg;
    struct longpoll *lp = w->lp;
    if (!rq) {   /* could not suspend: the handler's answer goes out now */
        free(w);
        pthread_mutex_lock(&lp->lock);
        lp->reserved--;
        pthread_cond_broadcast(&lp->idle);
        pthread_mutex_unlock(&lp->lock);
        return;
    }
    w->rq = rq;
    pthread_mutex_lock(&lp->lock);
    int closing = lp->closing;
    if (!closing) {
        if (atomic_load(&lp->seq) != w->seq) {
            w->recheck = 1;
            lp->pending = 1;
        }
        w->next = lp->head;
        if (lp->head)
            lp->head->prev = w;
        lp->head = w;
    }
    int wake = !closing && w->recheck;
    pthread_mutex_unlock(&lp->lock);
    if (closing) {
        request_resume(rq, 0, NULL);   /* the handler's answer, current a moment ago */
        free(w);
        pthread_mutex_lock(&lp->lock);
        lp->reserved--;
        pthread_cond_broadcast(&lp->idle);
        pthread_mutex_unlock(&lp->lock);
    } else if (wake) {
        longpoll_wake(lp);
    }
}

int longpoll_wait(struct longpoll *lp, struct request *rq, int64_t node_id, int64_t job_id,
                  int64_t epoch, int recovering, double wait_s, unsigned long seq)
{
    pthread_mutex_lock(&lp->lock);
    int admit = !lp->closing && lp->reserved < lp->max_waiters;
    if (admit)
        lp->reserved++;
    pthread_mutex_unlock(&lp->lock);
    if (!admit)
        return -1;
    struct waiter *w = calloc(1, sizeof *w);
    if (!w) {
        pthread_mutex_lock(&lp->lock);
        lp->reserved--;
        pthread_cond_broadcast(&lp->idle);
        pthread_mutex_unlock(&lp->lock);
        return -1;
    }
    w->lp = lp;
    w->node_id = node_id;
    w->job_id = job_id;
    w->epoch = epoch;
    w->recovering = recovering;
    /* Held 80-100% of wait_s, drawn per request: a fleet that started
     * together would otherwise come back together every wait_s, and each
     * wave of re-polls is a burst of queries beside the heartbeats. */
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint32_t)(node_id * 2654435761u);
    w->deadline = http_now() + wait_s * (1.0 - LONGPOLL_JITTER * (double)r / 4294967296.0);
    w->seq = seq;
    request_suspend(rq, longpoll_enter, w);
    return 0;
}

long longpoll_waiting(struct longpoll *lp)
{
    pthread_mutex_lock(&lp->lock);
    long n = lp->reserved;
    pthread_mutex_unlock(&lp->lock);
    return n;
}

int longpoll_listening(struct longpoll *lp)
{
    return atomic_load(&lp->listening);
}

void longpoll_stop(struct longpoll *lp)
{
    if (!lp)
        return;
    pthread_mutex_lock(&lp->lock);
    int was_closing = lp->closing;
    lp->closing = 1;
    pthread_mutex_unlock(&lp->lock);
    if (was_closing)
        return;
    longpoll_wake(lp);
    pthread_join(lp->thread, NULL);
    /* Requests admitted but not yet parked resume themselves (closing). */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += LONGPOLL_STOP_WAIT_S;
    pthread_mutex_lock(&lp->lock);
    while (lp->reserved > 0)
        if (pthread_cond_timedwait(&lp->idle, &lp->lock, &until) == ETIMEDOUT)
            break;
    if (lp->reserved > 0)
        log_error("assignment long-polls still parked at shutdown count=%ld", lp->reserved);
    pthread_mutex_unlock(&lp->lock);
}

void longpoll_free(struct longpoll *lp)
{
    if (!lp)
        return;
    close(lp->wake[0]);
    close(lp->wake[1]);
    pthread_mutex_destroy(&lp->lock);
    pthread_cond_destroy(&lp->idle);
    free(lp->conninfo);
    free(lp);
}
