#include "db.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"

struct db_pool {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    char *conninfo;
    int size;
    int in_use;
    PGconn **conns;   /* size slots; NULL = not yet opened */
    char *taken;      /* size flags: 1 while a caller holds the slot */
};

struct db_pool *db_pool_new(const char *conninfo, int size)
{
    struct db_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
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

/* Opens or repairs the connection in slot `i` (called without the lock held;
 * the slot is ours).  Returns 0 if it is usable. */
static int db_slot_ready(struct db_pool *p, int i, struct shoal_err *err)
{
    PGconn *c = p->conns[i];
    if (c && PQstatus(c) == CONNECTION_OK)
        return 0;
    if (c) {
        PQreset(c);
    } else {
        c = PQconnectdb(p->conninfo);
        p->conns[i] = c;
    }
    if (c && PQstatus(c) == CONNECTION_OK)
        return 0;
    const char *why = c ? PQerrorMessage(c) : "out of memory";
    log_warn("db connect failed: %.*s", (int)strcspn(why, "\n"), why);
    return err_set(err, 503, "database_unavailable", NULL,
                   "the database is unavailable; retry later");
}

PGconn *db_acquire(struct db_pool *p, struct shoal_err *err)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
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
        db_release(p, p->conns[slot]);
        return NULL;
    }
    return p->conns[slot];
}

void db_release(struct db_pool *p, PGconn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->size; i++) {
        if (p->conns[i] == c && p->taken[i]) {
            p->taken[i] = 0;
            p->in_use--;
            break;
        }
    }
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

int db_pool_in_use(struct db_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->in_use;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int db_pool_size(struct db_pool *p)
{
    return p->size;
}

PGresult *db_exec(PGconn *c, const char *sql, int n, const char *const *params,
                  struct shoal_err *err)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return r;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
    if (PQstatus(c) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
        strncmp(state, "57P", 3) == 0) {
        log_warn("db query failed, connection lost: %.*s", (int)strcspn(msg, "\n"), msg);
        err_set(err, 503, "database_unavailable", NULL, "the database is unavailable; retry later");
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
