#include "http.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/log.h"
#include "auth.h"
#include "http_limits.h"
#include "workq.h"
#include "../../common/clock.h"
#include "../../common/patience.h"
#include "../store/db.h"
#include "metrics.h"

/* A route lane's workers and their limits (router.h). */
struct http_lane {
    enum route_lane lane;
    int workers;
    double wait_s;     /* the longest a request waits for a worker */
    double budget_s;   /* database time since the request arrived, queue included */
};
static struct http_lane http_lanes[ROUTE_LANES];

#define TEXT_BODY_LIMIT (16u << 20)   /* bytes; /metrics and static files stay far below */
/* A refused upload or an over-cap body whose declared length is at most
 * this many bytes is read (and dropped) before the answer goes out:
 * answering first and closing
 * with unread bytes makes the kernel reset the connection, and the reset
 * can destroy the answer before the client reads it (RFC 9112, 9.6).
 * Larger bodies are answered at once, and so are clients that wait for
 * "100 Continue" (curl does above 1 MiB): they send nothing to reset. */
#define REFUSED_DRAIN_MAX (16ull << 20)
/* s of database time a token check may take on the HTTP thread, when the
 * headers arrive (the one database wait left there, and none for a known
 * node's token, auth.h; handlers run on database workers). */
#define HTTP_INLINE_DB_S 2.0
/* s of database time a probe (/readyz, /metrics) has, queue included:
 * Prometheus' scrape timeout is 10 s by default, and a probe's point is to
 * answer. */
#define HTTP_PROBE_DB_S 3.0
#define HTTP_PROBE_WORKERS 2
/* s past --db-timeout a database route may take (db.c's answer grace):
 * together they are the slowest answer an agent waits for (patience.h) */
#define HTTP_DB_GRACE_S ((double)PATIENCE_DB_GRACE_S)
#define HTTP_HOLD_RETRY_S 1   /* s a client over its share of the bodies in flight waits (Retry-After) */

double http_now(void)
{
    return mono_s();
}

/* Frees what a response holds (it may never have been sent). */
static void response_release(struct response *rs)
{
    json_decref(rs->json);
    rs->json = NULL;
    buf_free(&rs->text);
    if (rs->has_file)
        close(rs->file_fd);
    rs->has_file = 0;
}

int request_defer(struct request *rq, struct response *rs, deferred_fn fn, void *arg)
{
    int n = atomic_fetch_add(&rq->srv->deferred, 1);
    if (n >= SERVER_MAX_DEFERRED) {
        atomic_fetch_sub(&rq->srv->deferred, 1);
        reply_fail(rs, 503, "busy", NULL, "%d scheduling requests are already running; retry shortly",
                   SERVER_MAX_DEFERRED);
        return -1;
    }
    rq->defer_fn = fn;
    rq->defer_arg = arg;
    return 0;
}

/* Sleeps in 20 ms steps until *count is 0 or `ms` have passed. */
static void http_wait_zero(atomic_int *count, int ms)
{
    for (int waited = 0; atomic_load(count) > 0 && waited < ms; waited += 20) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

void http_wait_deferred(struct server *srv, int ms)
{
    http_wait_zero(&srv->deferred, ms);
}

void http_wait_suspended(struct server *srv, int ms)
{
    http_wait_zero(&srv->suspended, ms);
}

void request_suspend(struct request *rq, suspend_fn fn, void *arg)
{
    rq->suspend_fn = fn;
    rq->suspend_arg = arg;
}

void request_resume(struct request *rq, int status, json_t *body)
{
    if (body)
        reply_json(rq->deferred, status, body);
    atomic_store(&rq->deferred_done, 1);
    MHD_resume_connection(rq->conn);
}

/* Parks the request: its response moves to the heap (rq->deferred) and
 * the connection is suspended until http_unpark.  Returns 0, or -1 (nothing
 * parked) if memory is short.  Only on the HTTP thread, in http_access. */
static int http_park(struct request *rq, struct response *rs)
{
    rq->deferred = malloc(sizeof *rq->deferred);
    if (!rq->deferred)
        return -1;
    *rq->deferred = *rs;
    MHD_suspend_connection(rq->conn);
    return 0;
}

/* The parked request's response is final: let MHD send it.  Any thread;
 * afterwards rq must not be touched. */
static void http_unpark(struct request *rq)
{
    atomic_store(&rq->deferred_done, 1);
    MHD_resume_connection(rq->conn);
}

/* The deferred work's thread: run it, then let MHD send the answer. */
static void *http_deferred_main(void *p)
{
    struct request *rq = p;
    struct server *srv = rq->srv;
    rq->defer_fn(rq, rq->deferred, rq->defer_arg);
    http_unpark(rq);
    atomic_fetch_sub(&srv->deferred, 1);
    return NULL;
}

/* Gives up the work a handler left (request_defer, request_suspend) when
 * it cannot be handed on, freeing its argument; the deferred work's answer
 * becomes a 500 in rs. */
static void http_drop_handover(struct request *rq, struct response *rs)
{
    if (rq->defer_fn) {
        atomic_fetch_sub(&rq->srv->deferred, 1);
        rq->defer_fn(NULL, NULL, rq->defer_arg);   /* NULL request: only free the argument */
        rq->defer_fn = NULL;
        reply_fail(rs, 500, "internal", NULL, "cannot start the scheduling thread");
    }
    if (rq->suspend_fn) {
        rq->suspend_fn(NULL, rq->suspend_arg);
        rq->suspend_fn = NULL;
    }
}

/* The handler of parked request rq has returned: hand it to the thread or
 * owner it asked for (request_defer, request_suspend), or send its answer. */
static void http_hand_on(struct request *rq)
{
    if (rq->defer_fn) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, http_deferred_main, rq);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            return;
        http_drop_handover(rq, rq->deferred);
    } else if (rq->suspend_fn) {
        suspend_fn fn = rq->suspend_fn;
        rq->suspend_fn = NULL;
        rq->was_suspended = 1;
        atomic_fetch_add(&rq->srv->suspended, 1);
        fn(rq, rq->suspend_arg);
        return;
    }
    http_unpark(rq);
}

/* 1 if the request carries a body whose Content-Type is not JSON. */
static int http_wrong_content_type(struct request *rq)
{
    if (rq->body.len == 0)
        return 0;
    const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type");
    if (!ct)
        return 0;
    size_t n = strcspn(ct, ";");
    while (n > 0 && ct[n - 1] == ' ')
        n--;
    return !(n == strlen("application/json") && strncasecmp(ct, "application/json", n) == 0);
}

/* Turns the response into bytes and queues it on the connection. */
static enum MHD_Result http_send(struct request *rq, struct response *rs)
{
    char *body = NULL;
    size_t len = 0;
    const char *type = "application/json";
    struct MHD_Response *resp;
    if (rs->has_file) {
        rs->has_file = 0;   /* the response owns the descriptor from here on, even on failure */
        resp = MHD_create_response_from_fd64(rs->file_size, rs->file_fd);
        if (!resp) {
            close(rs->file_fd);
            return MHD_NO;
        }
        type = rs->content_type ? rs->content_type : "application/octet-stream";
        goto headers;
    }
    if (rs->json) {
        body = json_dumps(rs->json, JSON_COMPACT | JSON_REAL_PRECISION(15));
        len = body ? strlen(body) : 0;
    } else {
        body = rs->text.data;     /* ownership moves to the response; NULL if empty */
        len = rs->text.len;
        rs->text.data = NULL;
        type = rs->content_type ? rs->content_type : "text/plain; charset=utf-8";
    }
    if (!body && rs->json) {
        rs->status = 500;
        type = "text/plain; charset=utf-8";
    }
    resp = MHD_create_response_from_buffer(len, body ? body : (void *)"",
                                           body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
headers:
    MHD_add_response_header(resp, "Content-Type", type);
    if (rs->header_name)
        MHD_add_response_header(resp, rs->header_name, rs->header_value);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    if (rs->status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"shoal\"");
    if (rs->status == 405 && rs->allow[0])
        MHD_add_response_header(resp, "Allow", rs->allow);
    if (rs->close)
        MHD_add_response_header(resp, "Connection", "close");
    rq->status = rs->status;
    enum MHD_Result ok = MHD_queue_response(rq->conn, (unsigned)rs->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Adds "Retry-After: `s`" (seconds) to the answer. */
static void http_retry_after(struct response *rs, long s)
{
    rs->header_name = "Retry-After";
    snprintf(rs->header_value, sizeof rs->header_value, "%ld", s);
}

/* The route's token check, behind the failed-token limiter: an address
 * that failed too often gets 429 with Retry-After, its token unread; one
 * that registered too many nodes (the join token) too.  A node's or the
 * admin's token makes its address known (auth.h).  Returns 0, or -1 with
 * the answer (401, 403, 429, 503) in rs. */
static int http_authenticate(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    const struct route *r = &rq->srv->routes[rq->match.index];
    if (r->auth == AUTH_OPEN)
        return 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *from = ci ? ci->client_addr : NULL;
    double now = http_now();
    long retry_after = 0;   /* s */
    if (auth_limit_blocked(from, now, &retry_after)) {
        reply_fail(rs, 429, "too_many_failures", NULL,
                   "too many failed token attempts from this address; retry in %ld s", retry_after);
        http_retry_after(rs, retry_after);
        return -1;
    }
    const char *authz = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Authorization");
    int rc = auth_check(rq->srv, authz, r->auth, &rq->node_id, &e);
    if (rc == 0 && r->auth != AUTH_JOIN) {
        auth_addr_seen(from, now);   /* a node's or the admin's: connection admission keeps it room */
        return 0;
    }
    if (rc == 0 && auth_register_admit(from, now, &retry_after) == 0)
        return 0;
    if (rc == 0) {
        reply_fail(rs, 429, "too_many_registrations", NULL, "this address has registered %ld nodes within a "
                   "minute (--max-registrations); retry in %ld s", rq->srv->cfg.max_registrations, retry_after);
        http_retry_after(rs, retry_after);
        return -1;
    }
    if (e.status == 401)
        auth_limit_failed(from, now);
    reply_error(rs, &e);
    return -1;
}

/* The answer to a body over its node's or address's share of the bodies
 * in flight (http_hold_grow's error): retry in a second, on a new
 * connection (this one is closed after the answer). */
static void http_refuse_hold(struct request *rq, struct response *rs)
{
    reply_error(rs, &rq->hold_err);
    if (rs->status == 429)
        http_retry_after(rs, HTTP_HOLD_RETRY_S);
    rs->close = 1;
}

/* The checks before a handler runs: framing, route, body size,
 * authentication, content type.  Returns 0 to run the handler, or -1 with
 * the answer in rs. */
static int http_check(struct request *rq, struct response *rs)
{
    if (rq->framing_ambiguous == 2) {
        reply_fail(rs, 501, "not_implemented", "Transfer-Encoding",
                   "the only transfer coding this server reads is 'chunked'; send the body with a "
                   "Content-Length or as 'Transfer-Encoding: chunked'");
    } else if (rq->framing_ambiguous) {
        reply_fail(rs, 400, "ambiguous_length", NULL,
                   "send one Content-Length, or Transfer-Encoding: chunked without one");
    } else if (rq->route_status == 404) {
        reply_fail(rs, 404, "not_found", NULL, "no such endpoint: %s %s", rq->method, rq->path);
    } else if (rq->route_status == 405) {
        reply_fail(rs, 405, "method_not_allowed", NULL, "%s is not allowed here; use %s",
                   rq->method, rq->match.allow);
        snprintf(rs->allow, sizeof rs->allow, "%s", rq->match.allow);
    } else if (rq->route_status != 0) {
        reply_error(rs, &rq->route_err);
    } else if (rq->body_too_large) {
        reply_fail(rs, 413, "body_too_large", NULL, "the request body is over the %ld byte limit",
                   rq->srv->cfg.max_body);
    } else if (rq->hold_failed) {
        http_refuse_hold(rq, rs);
    } else if (!rq->authed && http_authenticate(rq, rs) != 0) {
        /* answered */
    } else if (!rq->sink && http_wrong_content_type(rq)) {
        reply_fail(rs, 415, "unsupported_media_type", NULL,
                   "send the body as JSON with 'Content-Type: application/json'");
    } else {
        rq->authed = 1;
        return 0;
    }
    return -1;
}

/* The lane that runs the request's handler (router.h), or NULL: this
 * thread, for inline routes and for answers the checks give before any
 * token is read (bad framing, no route, a body over the cap). */
static struct workq *http_lane_of(struct request *rq)
{
    if (rq->framing_ambiguous || rq->route_status != 0 || rq->body_too_large || rq->hold_failed)
        return NULL;
    return rq->srv->lanes[rq->srv->routes[rq->match.index].lane];
}

/* A lane's item: the checks and the handler on a worker, with the
 * database time the lane allows since the request arrived
 * (db_deadline_set); a late one (it waited its lane's limit) is answered
 * 503 at once, except a probe's, which runs with no database time left
 * (/metrics then says shoal_database_up 0). */
static void http_lane_run(void *item, int late, void *ctx)
{
    struct request *rq = item;
    const struct http_lane *ln = ctx;
    double waited = http_now() - rq->started;
    if (late && ln->lane == LANE_DATABASE && waited < ln->wait_s) {
        reply_fail(rq->deferred, 503, "shutting_down", NULL, "the server is stopping; retry shortly");
    } else if (late && ln->lane == LANE_DATABASE) {
        reply_fail(rq->deferred, 503, "database_busy", NULL,
                   "waited %.0f s for a database worker: all %d are busy (a slow or unreachable database); "
                   "nothing was done; retry later", waited, ln->workers);
    } else {
        db_deadline_set(late ? http_now() : rq->started + ln->budget_s);   /* late: none left */
        if (http_check(rq, rq->deferred) == 0)
            rq->srv->routes[rq->match.index].fn(rq, rq->deferred);
        db_deadline_set(0);
    }
    http_hand_on(rq);
}

/* Answers a fully received request: checks, then the handler, here or on
 * its lane's workers. */
static enum MHD_Result http_dispatch(struct request *rq)
{
    struct response rs = { .status = 500 };
    buf_init(&rs.text, TEXT_BODY_LIMIT);
    struct workq *lane = http_lane_of(rq);
    if (lane && http_park(rq, &rs) == 0) {
        if (workq_submit(lane, rq) != 0) {
            reply_fail(rq->deferred, 503, "busy", NULL,
                       "this server holds as many requests as it can for the database, or is stopping; retry "
                       "shortly");
            http_unpark(rq);
        }
        return MHD_YES;
    }
    if (lane)
        reply_fail(&rs, 500, "internal", NULL, "out of memory");
    else if (http_check(rq, &rs) == 0)
        rq->srv->routes[rq->match.index].fn(rq, &rs);
    if ((rq->defer_fn || rq->suspend_fn) && http_park(rq, &rs) == 0) {
        http_hand_on(rq);
        return MHD_YES;
    }
    http_drop_handover(rq, &rs);
    enum MHD_Result ok = http_send(rq, &rs);
    response_release(&rs);
    return ok;
}

/* The request's Content-Length in *n (bytes): 1, or 0 without one
 * (chunked, or no body), or -1 when it does not parse. */
static int http_declared(struct request *rq, unsigned long long *n)
{
    const char *cl = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Length");
    if (!cl)
        return 0;
    errno = 0;
    char *end;
    *n = strtoull(cl, &end, 10);
    return errno != 0 || end == cl || *end ? -1 : 1;
}

/* Content-Length larger than `cap` bytes (or unreadable).  A body sent
 * without one (chunked) counts as within. */
static int http_declared_over(struct request *rq, unsigned long long cap)
{
    unsigned long long n = 0;
    int has = http_declared(rq, &n);
    return has < 0 || (has > 0 && n > cap);
}

/* 1 if the client asked "Expect: 100-continue": it sends no body until told. */
static int http_expects_continue(struct request *rq)
{
    const char *expect = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Expect");
    return expect && strcasecmp(expect, "100-continue") == 0;
}

/* The token, checked as soon as the headers are in, before any of the body
 * is read: a caller without a valid one makes the server hold nothing for
 * it.  On the HTTP thread, so its database time is HTTP_INLINE_DB_S (a known
 * node's token needs none, auth.h).  Returns 0 when it passes (or the route
 * needs none), or -1 with the answer in rs. */
static int http_authenticate_early(struct request *rq, struct response *rs)
{
    db_deadline_set(rq->started + HTTP_INLINE_DB_S);
    int rc = http_authenticate(rq, rs);
    db_deadline_set(0);
    if (rc == 0)
        rq->authed = 1;
    return rc;
}

/* Starts counting the request's body against its node and address
 * (http_hold_grow) with the length it declares, before any of it
 * arrives, so that a node or an address over its share is told at once.
 * Returns 0, or -1 with the answer (429, with the connection closed) in
 * rs. */
static int http_hold_declared(struct request *rq, struct response *rs)
{
    unsigned long long declared = 0;
    http_hold_start(&rq->hold, rq->conn, rq->node_id);
    if (http_declared(rq, &declared) <= 0 || declared > (unsigned long long)rq->srv->cfg.max_body ||
        http_hold_grow(&rq->hold, declared, &rq->hold_err) == 0)
        return 0;   /* none declared, or over the cap (413): counted as it arrives, or not held at all */
    rq->hold_failed = 1;
    http_refuse_hold(rq, rs);
    return -1;
}

/* Keeps an answer given before the body was read: it goes out once the
 * body has been read and dropped when that is small (REFUSED_DRAIN_MAX),
 * else at once.  Returns what http_access returns. */
static enum MHD_Result http_refuse_early(struct request *rq, struct response *rs)
{
    if (rs->status != 413 && !http_expects_continue(rq) && !http_declared_over(rq, REFUSED_DRAIN_MAX) &&
        (rq->refused = malloc(sizeof *rq->refused)) != NULL) {
        *rq->refused = *rs;   /* moved: sent by http_access after the body */
        return MHD_YES;
    }
    enum MHD_Result ok = http_send(rq, rs);
    response_release(rs);
    return ok;
}

/* The headers of a streamed upload are in: check them and let the sink
 * start.  If either says no, the answer waits for the (dropped) body when
 * that is small (REFUSED_DRAIN_MAX), else it goes out at once. */
static enum MHD_Result http_upload_begin(struct request *rq)
{
    struct response rs = { .status = 500 };
    buf_init(&rs.text, TEXT_BODY_LIMIT);
    db_deadline_set(rq->started + HTTP_INLINE_DB_S);   /* the token check reads the database */
    int begun = http_check(rq, &rs) == 0 && rq->sink->begin(rq, &rs) == 0;
    db_deadline_set(0);
    if (!begun)
        return http_refuse_early(rq, &rs);
    response_release(&rs);
    return MHD_YES;
}

/* Sends a response kept on the heap (a deferred one, a refused upload's)
 * and frees it. */
static enum MHD_Result http_send_kept(struct request *rq, struct response *rs)
{
    enum MHD_Result ok = http_send(rq, rs);
    response_release(rs);
    free(rs);
    return ok;
}

/* 1 if the body is still arriving --request-timeout seconds after the
 * headers, for a buffered body or a refused upload's; an accepted upload
 * (a checkpoint, from a node with a valid token) may take as long as it
 * keeps sending.  The idle timeout covers a client that stops instead. */
static int http_overdue(struct request *rq)
{
    if (rq->sink && rq->upload)
        return 0;
    double secs = http_now() - rq->started;
    if (secs <= (double)rq->srv->cfg.request_timeout_s)
        return 0;
    log_warn("http dropping a request whose body is still arriving after %.1f s (--request-timeout %ld) "
             "method=%s route=%s", secs, rq->srv->cfg.request_timeout_s, rq->method,
             rq->route_status == 0 ? rq->srv->routes[rq->match.index].pattern : "-");
    return 1;
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct request *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        rq->srv = cls;
        rq->conn = conn;
        rq->method = method;
        rq->path = url;
        rq->started = http_now();
        http_conn_mark(conn, 1);   /* its head is in */
        buf_init(&rq->body, (size_t)rq->srv->cfg.max_body);
        rq->route_status = router_match(rq->srv->routes, rq->srv->routes_count, method, url, &rq->match,
                                        &rq->route_err);
        *con_cls = rq;
        if (http_framing_ambiguous(rq->conn) || http_coding_unknown(rq->conn)) {   /* answered before any body */
            rq->framing_ambiguous = 1 + http_coding_unknown(rq->conn);
            return http_dispatch(rq);
        }
        if (rq->route_status == 0 && (rq->sink = rq->srv->upload_sink(rq->match.index)) != NULL)
            return http_upload_begin(rq);
        if (rq->route_status == 0) {
            struct response rs = { .status = 500 };
            buf_init(&rs.text, TEXT_BODY_LIMIT);
            if (http_authenticate_early(rq, &rs) != 0 || http_hold_declared(rq, &rs) != 0)
                return http_refuse_early(rq, &rs);
            response_release(&rs);
        }
        /* Larger than the cap: 413.  A client waiting for "100 Continue"
         * (or declaring a huge body) gets it at once; one already sending
         * has its body read and dropped first, as a refused upload's. */
        if (http_declared_over(rq, (unsigned long long)rq->srv->cfg.max_body)) {
            rq->body_too_large = 1;
            if (http_expects_continue(rq) || http_declared_over(rq, REFUSED_DRAIN_MAX))
                return http_dispatch(rq);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (http_overdue(rq))
            return MHD_NO;   /* closes the connection */
        if (rq->sink) {
            if (rq->upload)   /* else already answered: the rest is dropped */
                rq->sink->chunk(rq, upload, *upload_size);
        } else if (rq->refused || rq->route_status != 0 || rq->body_too_large || rq->hold_failed) {
            /* answered before the body, or to be answered whatever it
             * holds: it is read and dropped, never held */
        } else if (http_hold_grow(&rq->hold, rq->body.len + *upload_size, &rq->hold_err) != 0) {
            rq->hold_failed = 1;   /* a chunked body past its share: what it held goes */
            buf_free(&rq->body);
            http_hold_release(&rq->hold);
        } else if (buf_append(&rq->body, upload, *upload_size) != 0) {
            rq->body_too_large = 1;
            buf_free(&rq->body);
            http_hold_release(&rq->hold);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->refused) {   /* its body is read: now the answer */
        struct response *rs = rq->refused;
        rq->refused = NULL;
        return http_send_kept(rq, rs);
    }
    if (rq->status)   /* already answered (early 413, refused upload) */
        return MHD_YES;
    if (rq->deferred) {   /* resumed: the thread has filled the response */
        if (!atomic_load(&rq->deferred_done))
            return MHD_YES;
        struct response *rs = rq->deferred;
        rq->deferred = NULL;
        return http_send_kept(rq, rs);
    }
    return http_dispatch(rq);
}

/* Runs once per request after the response is sent (or the client left). */
static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode why)
{
    struct server *srv = cls;
    struct request *rq = *con_cls;
    if (!rq)
        return;
    http_conn_mark(conn, 0);   /* waiting for its next head, if it stays open */
    double secs = http_now() - rq->started;
    /* A matched route, or the route whose id was bad (400); else -1. */
    int route = rq->match.index;
    metrics_observe(srv->metrics, route, rq->method, rq->status, secs);
    /* one line per request at debug (at info they were 95% of the log);
     * a server error at warn */
    LOG_AT(rq->status >= 500 ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG, "http method=%s route=%s status=%d ms=%.2f%s",
           rq->method, route >= 0 ? srv->routes[route].pattern : "-", rq->status, secs * 1000.0,
           why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
    if (rq->upload)
        rq->sink->abort(rq);
    if (rq->refused) {   /* the client left before its body was read */
        response_release(rq->refused);
        free(rq->refused);
    }
    if (rq->was_suspended)
        atomic_fetch_sub(&srv->suspended, 1);
    /* Resumed, then closed before it was sent (client gone, shutdown).  One
     * not done is still being written by its thread: leave it to that. */
    if (rq->deferred && atomic_load(&rq->deferred_done)) {
        response_release(rq->deferred);
        free(rq->deferred);
    }
    buf_free(&rq->body);
    http_hold_release(&rq->hold);
    free(rq);
    *con_cls = NULL;
}

/* Starts the workers of the lanes that are not inline: a database worker
 * per pooled connection, each request waiting at most --db-timeout for one;
 * two probe workers.  Returns 0, or -1 with err set (none left running). */
static int http_lanes_start(struct server *srv, struct shoal_err *err)
{
    const struct config *cfg = &srv->cfg;
    http_lanes[LANE_DATABASE] = (struct http_lane){ LANE_DATABASE, (int)cfg->db_pool, (double)cfg->db_timeout_s,
                                                    (double)cfg->db_timeout_s + HTTP_DB_GRACE_S };
    http_lanes[LANE_PROBE] = (struct http_lane){ LANE_PROBE, HTTP_PROBE_WORKERS, HTTP_PROBE_DB_S, HTTP_PROBE_DB_S };
    for (int l = 0; l < ROUTE_LANES; l++) {
        const struct http_lane *ln = &http_lanes[l];
        if (l == LANE_INLINE)
            continue;
        /* a connection holds one request at a time: never more waiting than connections */
        srv->lanes[l] = workq_start(route_lane_names[l], ln->workers, (int)http_connection_limit(cfg), ln->wait_s,
                                    http_lane_run, &http_lanes[l], err);
        if (!srv->lanes[l]) {
            http_lanes_stop(srv);
            return -1;
        }
    }
    return 0;
}

void http_lanes_stop(struct server *srv)
{
    for (int l = 0; l < ROUTE_LANES; l++) {
        workq_stop(srv->lanes[l]);
        srv->lanes[l] = NULL;
    }
}

struct MHD_Daemon *http_start(struct server *srv, unsigned *bound_port, struct shoal_err *err)
{
    struct sockaddr_in6 a6 = { 0 };
    struct sockaddr_in a4 = { 0 };
    struct sockaddr *addr;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (inet_pton(AF_INET, srv->cfg.listen_addr, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)srv->cfg.port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, srv->cfg.listen_addr, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)srv->cfg.port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        err_set(err, 2, "invalid_config", "listen", "--listen must be an IPv4 or IPv6 address, got '%s'",
                srv->cfg.listen_addr);
        return NULL;
    }
    /* HTTPS when a certificate was loaded (tls.h): TLS 1.2 and 1.3 only. */
    struct MHD_OptionItem tls_opts[] = {
        { MHD_OPTION_HTTPS_MEM_KEY, 0, srv->tls.key_pem },
        { MHD_OPTION_HTTPS_MEM_CERT, 0, srv->tls.cert_pem },
        { MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" },
        { MHD_OPTION_END, 0, NULL },
    };
    if (srv->tls.cert_pem)
        flags |= MHD_USE_TLS;
    if (http_conns_start(&srv->cfg, err) != 0 || http_lanes_start(srv, err) != 0) {
        http_conns_stop();
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)srv->cfg.port, http_admit, NULL, http_access, srv,
        MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_ARRAY, srv->tls.cert_pem ? tls_opts : tls_opts + 3,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)srv->cfg.threads,
        MHD_OPTION_NOTIFY_COMPLETED, http_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, NULL,
        MHD_OPTION_UNESCAPE_CALLBACK, http_unescape, NULL,
        /* Resets with every byte received; suspended connections (waiting
         * long-polls, scheduling) do not time out at all (MHD 0.9.75). */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->cfg.idle_timeout_s,
        /* http_admit decides within these: the limit and its reserve */
        MHD_OPTION_CONNECTION_LIMIT, http_connection_limit(&srv->cfg) + HTTP_RESERVE_CONNECTIONS,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)srv->cfg.connection_memory,
        MHD_OPTION_END);
    if (!d) {
        err_set(err, 2, "listen_failed", "port", "cannot listen on %s port %ld: %s",
                srv->cfg.listen_addr, srv->cfg.port, strerror(errno));
        http_lanes_stop(srv);
        http_conns_stop();
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : (unsigned)srv->cfg.port;
    return d;
}

void http_stop(struct MHD_Daemon *d)
{
    if (d)
        MHD_stop_daemon(d);
    http_conns_stop();
}
