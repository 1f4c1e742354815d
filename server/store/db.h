/* db.h - a small pool of libpq connections and the query helpers handlers use.
 *
 * Connections are opened lazily and re-established when Postgres went away,
 * so a database restart costs a few 503s, not a server restart: while the
 * database cannot be reached every call that needs it fails with 503
 * "database_unavailable" within a bounded time (the connect timeout), and
 * the first call after it is back gets a working connection (an idle one
 * that the server closed meanwhile is noticed and reopened before use).
 * Every statement is bounded (--db-timeout), so a frozen database costs a
 * request a 503, not a thread held for the whole freeze.  Every query goes
 * through PQsendQueryParams. */
#ifndef SHOAL_DB_H
#define SHOAL_DB_H

#include <jansson.h>
#include <libpq-fe.h>

#include "../../common/err.h"

struct db_pool;

/* Opens one connection to `conninfo` (a libpq conninfo string or URL) with
 * shoal's settings: a bounded connect, TCP keepalives, and the server's
 * notices sent to our log.  Settings in `conninfo` win over these.  Returns
 * the connection whatever its PQstatus (the caller checks it and PQfinish'es
 * it either way), or NULL only when memory is short. */
PGconn *db_connect(const char *conninfo);

/* Creates a pool of up to `size` connections to `conninfo` (not yet opened).
 * `timeout_ms` (--db-timeout) bounds every statement: the database cancels
 * one that runs longer (statement_timeout, set on every connection
 * db_connect opens from then on), and db_exec stops waiting for an answer
 * 2 s after that (a frozen or unreachable database).  Returns NULL only when
 * memory is short.  Free with db_pool_close. */
struct db_pool *db_pool_new(const char *conninfo, int size, long timeout_ms);

/* Closes every connection and frees the pool. */
void db_pool_close(struct db_pool *p);

/* Takes a healthy connection, waiting up to 5 s for one to be free, then
 * checking it (and reopening it if Postgres closed it, within the connect
 * timeout, 5 s; both waits end at the thread's deadline, db_deadline_set).  Returns NULL with
 * `err` set if none can be had: 503 "database_busy" when all are taken,
 * 503 "database_unavailable" when the database cannot be reached.
 * The caller gives it back with db_release. */
PGconn *db_acquire(struct db_pool *p, struct shoal_err *err);

/* Returns a connection taken with db_acquire.  NULL is ignored. */
void db_release(struct db_pool *p, PGconn *c);

/* Since when (CLOCK_MONOTONIC s) the database has answered this pool's
 * callers without a failure (a connect that failed, a connection given back
 * broken or still in a statement that ran out of time): the first answer
 * after the last failure, 0 if none ever failed, now while it fails.  The
 * recovery thread waits a heartbeat timeout from it before it calls a
 * silent node lost. */
double db_pool_healthy_since(struct db_pool *p);

/* 1 while the database fails this pool's callers: the last caller given
 * back (or the last connect) failed, and none has been answered since. */
int db_pool_troubled(struct db_pool *p);

/* Connections currently taken, and the pool's size (for /metrics). */
int db_pool_in_use(struct db_pool *p);
int db_pool_size(struct db_pool *p);

/* Runs `sql` with `n` text parameters (NULL entries are SQL NULL).  Returns
 * the result (caller PQclear's it) when the statement succeeded, else NULL
 * with `err` set: 503 "database_unavailable" if the connection is gone or
 * no answer came within --db-timeout + 2 s (the connection is then reopened
 * before its next use), 503 "database_busy" when statement_timeout cancelled
 * it, 409 "conflict" on a unique or foreign-key violation, 500 otherwise. */
PGresult *db_exec(PGconn *c, const char *sql, int n, const char *const *params,
                  struct shoal_err *err);

/* db_exec waiting `wait_s` seconds for the answer (0: as long as it takes;
 * for migrations, which also lift statement_timeout). */
PGresult *db_exec_within(PGconn *c, const char *sql, int n, const char *const *params, double wait_s,
                         struct shoal_err *err);

/* Runs a query whose first row's first column is JSON text and returns it
 * parsed (caller json_decref's it).  No row: NULL with a 404 "not_found"
 * error that says "`what` does not exist" (what = "job 12", say). */
json_t *db_exec_json(PGconn *c, const char *sql, int n, const char *const *params,
                     const char *what, struct shoal_err *err);

/* db_exec_json on a connection taken from `p` and given back: the one call
 * most handlers make.  Same contract as db_exec_json. */
json_t *db_query_json(struct db_pool *p, const char *sql, int n, const char *const *params,
                      const char *what, struct shoal_err *err);

/* Sets the calling thread's deadline for database work (CLOCK_MONOTONIC s;
 * 0: none): from then on db_acquire, opening a connection and every
 * statement wait at most until it, and fail with 503 "database_busy" once
 * it has passed.  The HTTP layer sets it for the request a thread serves,
 * so a frozen or slow database costs a request a bounded time in all,
 * however many statements it makes. */
void db_deadline_set(double until);

/* Text forms of numbers for query parameters; return `out` for use inline. */
const char *db_param_i64(char out[24], long long v);
const char *db_param_f64(char out[32], double v);

#endif
