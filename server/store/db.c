#include "db.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/log.h"
#include "../../common/clock.h"
#include "../../common/patience.h"

/* libpq settings every connection gets; the caller's conninfo, expanded
 * after them, still wins.  A bounded connect, so an unreachable host costs a
 * request a 503 within seconds instead of holding a slot for the kernel's
 * TCP timeout; keepalives (TCP only), so a connection to a host that
 * vanished without closing it is found dead in about a minute. */
#define DB_CONNECT_TIMEOUT_S "5"
#define DB_KEEPALIVES_IDLE_S "30"
#define DB_KEEPALIVES_INTERVAL_S "10"
#define DB_KEEPALIVES_COUNT "3"
#define DB_DOWN_LOG_EVERY_S 30.0   /* s between "still unreachable" lines during an outage */
/* s the client waits past statement_timeout for the server's own error:
 * the grace of common/patience.h, which agents' patience is measured by */
#define DB_ANSWER_GRACE_S ((double)PATIENCE_DB_GRACE_S)
#define DB_IDLE_READS 4            /* reads that may drain a closing connection's last words */
#define DB_ACQUIRE_WAIT_S 5.0      /* s a caller waits for a free connection */

/* --db-timeout in ms: the server's statement_timeout on pooled connections,
 * and (plus DB_ANSWER_GRACE_S) how long db_exec waits for an answer before
 * it gives the connection up.  One value for the process (db_pool_new). */
static _Atomic long db_timeout_ms = PATIENCE_DB_TIMEOUT_S * 1000;

struct db_pool {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    char *conninfo;
    int size;
    int in_use;
    PGconn **conns;   /* size slots; NULL = not yet opened */
    char *taken;      /* size flags: 1 while a caller holds the slot */
    int down;         /* the last connect failed */
    double down_since, down_logged;   /* monotonic s */
    int troubled;          /* the last caller given back was failed by the database */
    double healthy_since;  /* monotonic s of the first answer after the last failure; 0: none failed */
};

/* The calling thread's deadline for database work (monotonic s; 0: none),
 * set for the request it serves (db_deadline_set). */
static _Thread_local double db_deadline;

void db_deadline_set(double until)
{
    db_deadline = until;
}

/* Seconds this thread may still wait: `cap`, or less when its deadline
 * comes first (<= 0: none left). */
static double db_wait_left(double cap)
{
    if (db_deadline <= 0)
        return cap;
    double left = db_deadline - mono_s();
    return left < cap ? left : cap;
}

/* The error of a request whose database time ran out. */
static int db_out_of_time(struct shoal_err *err)
{
    return err_set(err, 503, "database_busy", NULL,
                   "the database did not serve this request within its time (--db-timeout); nothing more was "
                   "done; retry later");
}

/* libpq's notice receiver: messages the server sends outside any result
 * (a backend's "terminating connection due to administrator command" when
 * Postgres stops, a migration's NOTICE) go to our log, not raw to stderr. */
static void db_notice(void *arg, const PGresult *r)
{
    (void)arg;
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *msg = PQresultErrorMessage(r);
    int serious = sev && (strcmp(sev, "WARNING") == 0 || strcmp(sev, "ERROR") == 0 ||
                          strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0);
    if (serious)
        log_warn("postgres says: %.*s", (int)strcspn(msg, "\n"), msg);
    else
        log_debug("postgres says: %.*s", (int)strcspn(msg, "\n"), msg);
}

/* Opens a connection with shoal's settings: at once and blocking
 * (PQconnectdbParams, bounded by connect_timeout), or only started
 * (PQconnectStartParams: db_connect_finish makes it). */
static PGconn *db_open(const char *conninfo, int start_only)
{
    char options[64];
    snprintf(options, sizeof options, "-c statement_timeout=%ld", atomic_load(&db_timeout_ms));
    const char *const keys[] = { "connect_timeout", "keepalives_idle", "keepalives_interval",
                                 "keepalives_count", "options", "dbname", NULL };
    const char *const values[] = { DB_CONNECT_TIMEOUT_S, DB_KEEPALIVES_IDLE_S, DB_KEEPALIVES_INTERVAL_S,
                                   DB_KEEPALIVES_COUNT, options, conninfo, NULL };
    PGconn *c = start_only ? PQconnectStartParams(keys, values, 1) : PQconnectdbParams(keys, values, 1);
    if (c)
        PQsetNoticeReceiver(c, db_notice, NULL);   /* kept across PQreset */
    return c;
}

PGconn *db_connect(const char *conninfo)
{
    return db_open(conninfo, 0);
}

/* Drives a connection started by PQconnectStartParams or PQresetStart
 * (`resetting`) until it is made, fails, or `wait_s` seconds pass (a
 * frozen database accepts the socket and never answers the start-up).
 * Returns 1 when it is up; otherwise the connection is left not OK, and
 * the pool starts it again before its next use. */
static int db_connect_finish(PGconn *c, int resetting, double wait_s)
{
    double until = mono_s() + wait_s;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;   /* libpq's rule for the first wait */
    if (PQstatus(c) == CONNECTION_BAD)
        return 0;
    for (;;) {
        if (st == PGRES_POLLING_OK)
            return 1;
        if (st == PGRES_POLLING_FAILED)
            return 0;
        double left = until - mono_s();
        if (left <= 0)
            return 0;
        struct pollfd pfd = { PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0 };
        int n = poll(&pfd, 1, (int)(left * 1000.0) + 1);
        if (n < 0 && errno != EINTR)
            return 0;
        if (n > 0)
            st = resetting ? PQresetPoll(c) : PQconnectPoll(c);
    }
}

struct db_pool *db_pool_new(const char *conninfo, int size, long timeout_ms)
{
    struct db_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    atomic_store(&db_timeout_ms, timeout_ms);
    p->conninfo = strdup(conninfo);
    p->conns = calloc((size_t)size, sizeof *p->conns);
    p->taken = calloc((size_t)size, 1);
    if (!p->conninfo || !p->conns || !p->taken) {
        free(p->conninfo);
        free(p->conns);
        free(p->taken);
        free(p);
        return NULL;
    }
    p->size = size;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    return p;
}

void db_pool_close(struct db_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->size; i++)
        if (p->conns[i])
            PQfinish(p->conns[i]);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->freed);
    free(p->conninfo);
    free(p->conns);
    free(p->taken);
    free(p);
}

/* 1 if idle pooled connection `c` can take a query: open, outside any
 * transaction, and with nothing to read.  The server sends an idle
 * connection nothing unless it is ending it (Postgres stopping or
 * restarting, pg_terminate_backend): reading that goodbye here marks the
 * connection bad, so it is reopened before use instead of failing the next
 * request's query with a 503 long after the database came back. */
static int db_conn_alive(PGconn *c)
{
    for (int i = 0; i < DB_IDLE_READS; i++) {
        if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE)
            return 0;
        struct pollfd pfd = { PQsocket(c), POLLIN, 0 };
        int n = poll(&pfd, 1, 0);
        if (n == 0)
            return 1;
        /* The error message and the end of the stream may come in two reads. */
        if (n < 0 || !PQconsumeInput(c))
            return 0;
    }
    return PQstatus(c) == CONNECTION_OK;
}

/* Logs the database going away (once, then every DB_DOWN_LOG_EVERY_S while
 * it stays away) and coming back, so an outage under load is a few lines in
 * the log rather than one per request.  `why` is libpq's reason when !ok. */
static void db_pool_note(struct db_pool *p, int ok, const char *why)
{
    double now = mono_s(), since = 0;
    int first = 0, again = 0, back = 0;
    pthread_mutex_lock(&p->lock);
    if (ok && p->down) {
        back = 1;
        since = p->down_since;
        p->down = 0;
    }
    if (!ok)
        p->troubled = 1;
    if (!ok && !p->down) {
        first = 1;
        p->down = 1;
        p->down_since = p->down_logged = now;
    } else if (!ok && now - p->down_logged >= DB_DOWN_LOG_EVERY_S) {
        again = 1;
        since = p->down_since;
        p->down_logged = now;
    }
    pthread_mutex_unlock(&p->lock);
    if (back)
        log_info("database reachable again after %.1f s", now - since);
    else if (first)
        log_warn("database unreachable, answering 503 until it is back: %.*s", (int)strcspn(why, "\n"), why);
    else if (again)
        log_warn("database still unreachable after %.0f s: %.*s", now - since, (int)strcspn(why, "\n"), why);
}

/* Opens or repairs the connection in slot `i` (called without the lock held;
 * the slot is ours).  Returns 0 if it is usable. */
static int db_slot_ready(struct db_pool *p, int i, struct shoal_err *err)
{
    PGconn *c = p->conns[i];
    if (c && db_conn_alive(c))
        return 0;
    double wait_s = db_wait_left(strtod(DB_CONNECT_TIMEOUT_S, NULL));
    if (wait_s <= 0)
        return db_out_of_time(err);
    int resetting = c != NULL;
    if (c) {
        if (!PQresetStart(c))
            resetting = -1;
    } else {
        c = db_open(p->conninfo, 1);
        pthread_mutex_lock(&p->lock);   /* db_release reads every slot's pointer */
        p->conns[i] = c;
        pthread_mutex_unlock(&p->lock);
    }
    /* Bounded by connect_timeout and the caller's deadline, whichever is first. */
    int ok = c && resetting >= 0 && db_connect_finish(c, resetting, wait_s) && PQstatus(c) == CONNECTION_OK;
    const char *why = !c ? "out of memory" : *PQerrorMessage(c) ? PQerrorMessage(c) : "no answer to its start-up";
    db_pool_note(p, ok, why);
    if (ok)
        return 0;
    return err_set(err, 503, "database_unavailable", NULL,
                   "the database is unavailable: this server cannot connect to it; retry later");
}

/* Gives slot `i` back and wakes one waiter; the lock is held. */
static void db_release_slot_locked(struct db_pool *p, int i)
{
    if (p->taken[i]) {
        p->taken[i] = 0;
        p->in_use--;
    }
    pthread_cond_signal(&p->freed);
}

PGconn *db_acquire(struct db_pool *p, struct shoal_err *err)
{
    double wait_s = db_wait_left(DB_ACQUIRE_WAIT_S);
    if (wait_s <= 0) {
        db_out_of_time(err);
        return NULL;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double at = (double)deadline.tv_nsec / 1e9 + wait_s;
    deadline.tv_sec += (time_t)at;
    deadline.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
    int slot = -1;
    pthread_mutex_lock(&p->lock);
    while (slot < 0) {
        for (int i = 0; i < p->size && slot < 0; i++)
            if (!p->taken[i])
                slot = i;
        if (slot >= 0)
            break;
        if (pthread_cond_timedwait(&p->freed, &p->lock, &deadline) == ETIMEDOUT)
            break;
    }
    if (slot >= 0) {
        p->taken[slot] = 1;
        p->in_use++;
    }
    pthread_mutex_unlock(&p->lock);
    if (slot < 0) {
        err_set(err, 503, "database_busy", NULL, "all database connections are busy; retry later");
        return NULL;
    }
    if (db_slot_ready(p, slot, err) != 0) {
        /* By slot: the connection may be NULL (out of memory), and the
         * slot must come back either way. */
        pthread_mutex_lock(&p->lock);
        db_release_slot_locked(p, slot);
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    return p->conns[slot];
}

void db_release(struct db_pool *p, PGconn *c)
{
    if (!c)
        return;
    /* Broken, or left mid-statement by a timeout: the database failed
     * this caller. */
    int troubled = PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) == PQTRANS_ACTIVE ||
                   PQtransactionStatus(c) == PQTRANS_UNKNOWN;
    double now = mono_s();
    pthread_mutex_lock(&p->lock);
    if (troubled) {
        p->troubled = 1;
    } else if (p->troubled) {
        p->troubled = 0;
        p->healthy_since = now;
    }
    for (int i = 0; i < p->size; i++) {
        if (p->conns[i] == c && p->taken[i]) {   /* PQreset keeps the pointer */
            db_release_slot_locked(p, i);
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
}

int db_pool_in_use(struct db_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->in_use;
    pthread_mutex_unlock(&p->lock);
    return n;
}

double db_pool_healthy_since(struct db_pool *p)
{
    double now = mono_s();
    pthread_mutex_lock(&p->lock);
    double t = p->troubled ? now : p->healthy_since;
    pthread_mutex_unlock(&p->lock);
    return t;
}

int db_pool_troubled(struct db_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int t = p->troubled;
    pthread_mutex_unlock(&p->lock);
    return t;
}

int db_pool_size(struct db_pool *p)
{
    return p->size;
}

/* Waits until `deadline` (monotonic s) for the answer to the statement
 * sent on `c`, as PQexecParams would: the first error result, else the
 * last result.  NULL with *late set when the deadline passed first: the
 * connection is left mid-statement, which db_conn_alive sees, so the pool
 * reopens it before its next use. */
static PGresult *db_answer(PGconn *c, double deadline, int *late)
{
    PGresult *kept = NULL, *r;
    for (;;) {
        while (!PQisBusy(c)) {
            if ((r = PQgetResult(c)) == NULL)
                return kept;
            ExecStatusType st = PQresultStatus(r);
            int error = st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR || st == PGRES_BAD_RESPONSE;
            if (kept && (!error || PQresultStatus(kept) == PGRES_FATAL_ERROR)) {
                PQclear(r);
                continue;
            }
            PQclear(kept);
            kept = r;
        }
        double left = deadline - mono_s();
        if (left <= 0) {
            PQclear(kept);
            *late = 1;
            return NULL;
        }
        struct pollfd pfd = { PQsocket(c), POLLIN, 0 };
        int got = poll(&pfd, 1, left > 3600.0 ? -1 : (int)(left * 1000.0) + 1);
        if (got < 0 && errno != EINTR) {
            PQclear(kept);
            return NULL;
        }
        /* A broken connection: PQgetResult reports it as an error result. */
        if (got > 0)
            PQconsumeInput(c);
    }
}

PGresult *db_exec(PGconn *c, const char *sql, int n, const char *const *params,
                  struct shoal_err *err)
{
    return db_exec_within(c, sql, n, params, (double)atomic_load(&db_timeout_ms) / 1000.0 + DB_ANSWER_GRACE_S,
                          err);
}

PGresult *db_exec_within(PGconn *c, const char *sql, int n, const char *const *params, double wait_s,
                         struct shoal_err *err)
{
    int late = 0;
    PGresult *r = NULL;
    if (db_deadline > 0) {   /* the request's time bounds every statement of it */
        wait_s = db_wait_left(wait_s > 0 ? wait_s : HUGE_VAL);
        if (wait_s <= 0) {
            db_out_of_time(err);
            return NULL;
        }
    }
    if (PQsendQueryParams(c, sql, n, NULL, params, NULL, NULL, 0))
        r = db_answer(c, wait_s > 0 ? mono_s() + wait_s : HUGE_VAL, &late);
    if (late) {
        log_warn("db query: no answer in %.1f s, giving the connection up", wait_s);
        err_set(err, 503, "database_unavailable", NULL,
                "the database is unavailable: it did not answer within %.0f s (--db-timeout); this request "
                "may or may not have taken effect; retry later", wait_s);
        return NULL;
    }
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return r;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
    if (PQstatus(c) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
        strncmp(state, "57P", 3) == 0) {
        /* No SQLSTATE is libpq's own failure: the connection broke. */
        log_warn("db query failed, connection lost: %.*s", (int)strcspn(msg, "\n"), msg);
        err_set(err, 503, "database_unavailable", NULL,
                "the database is unavailable: the connection to it was lost during this request, "
                "which may or may not have taken effect; retry later");
    } else if (strcmp(state, "57014") == 0) {   /* statement_timeout */
        log_warn("db query cancelled by statement_timeout: %.*s", (int)strcspn(msg, "\n"), msg);
        err_set(err, 503, "database_busy", NULL,
                "the database did not finish this request within --db-timeout; nothing was changed; retry "
                "later");
    } else if (strcmp(state, "23505") == 0 || strcmp(state, "23503") == 0) {
        err_set(err, 409, "conflict", NULL, "%.*s", (int)strcspn(msg, "\n"), msg);
    } else {
        log_error("db query failed sqlstate=%s: %.*s", state, (int)strcspn(msg, "\n"), msg);
        err_set(err, 500, "internal", NULL, "database error (sqlstate %s)", state);
    }
    PQclear(r);
    return NULL;
}

json_t *db_exec_json(PGconn *c, const char *sql, int n, const char *const *params,
                     const char *what, struct shoal_err *err)
{
    json_t *out = NULL;
    PGresult *r = db_exec(c, sql, n, params, err);
    if (!r)
        goto out;
    if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0)) {
        err_set(err, 404, "not_found", NULL, "%s does not exist", what);
        goto out;
    }
    json_error_t je;
    out = json_loads(PQgetvalue(r, 0, 0), JSON_DECODE_ANY, &je);
    if (!out)
        err_set(err, 500, "internal", NULL, "database returned bad JSON: %s", je.text);
out:
    PQclear(r);
    return out;
}

json_t *db_query_json(struct db_pool *p, const char *sql, int n, const char *const *params,
                      const char *what, struct shoal_err *err)
{
    PGconn *c = db_acquire(p, err);
    if (!c)
        return NULL;
    json_t *out = db_exec_json(c, sql, n, params, what, err);
    db_release(p, c);
    return out;
}

const char *db_param_i64(char out[24], long long v)
{
    snprintf(out, 24, "%lld", v);
    return out;
}

const char *db_param_f64(char out[32], double v)
{
    snprintf(out, 32, "%.17g", v);
    return out;
}
