/* http.h - the libmicrohttpd glue: requests in, JSON responses out
 * (http.c the engine; http_reply.c what handlers write and read).
 *
 * A request is matched against the route table and its token checked as
 * soon as its headers arrive (a caller without a valid token makes the
 * server hold none of its body), then read whole (body capped at
 * --max-body) and handed to its handler, which fills a
 * response with reply_json, reply_error or reply_file.  Routes with an
 * upload sink (routes_upload_sink) stream their body instead.  A handler
 * may finish later: on a thread of its own (request_defer) or, holding no
 * thread at all, from whoever it hands the request to (request_suspend).
 * Every request is logged and counted once it completes.
 *
 * Handlers run where their route's lane says (router.h): those that touch
 * the database on a fixed set of database workers (workq.h), with the
 * connection suspended meanwhile, so the threads that take connections
 * never wait for the database and /healthz answers in milliseconds while
 * it is frozen.  A request waits at most --db-timeout for a worker and has
 * --db-timeout + 2 s of database time in all (db_deadline_set), then gets
 * 503 database_busy.  /readyz and /metrics run on two probe workers with 3
 * s of database time.
 *
 * Limits (config.h, docs/operations.md, "Limits"): connections in all and per client
 * address, with a reserve only known addresses may take (http_limits.h),
 * an idle timeout, a deadline for buffered bodies, memory per connection
 * for the request head, the body cap, the bytes of bodies in flight per
 * node and per address (http_hold), and the failed-token and registration
 * limiters (auth.h) in front of every route that needs a token. */
#ifndef SHOAL_HTTP_H
#define SHOAL_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../../common/buf.h"
#include "../../common/err.h"
#include "http_limits.h"
#include "router.h"
#include "../base/server.h"

struct response;
typedef void (*deferred_fn)(struct request *rq, struct response *rs, void *arg);
typedef void (*suspend_fn)(struct request *rq, void *arg);

/* A route whose request body is streamed instead of buffered (a checkpoint
 * can be gigabytes).  `begin` runs once the headers are in, after routing
 * and authentication; it may answer at once (returning -1 with the answer
 * in rs) or set up rq->upload and return 0.  `chunk` then gets every piece
 * of the body, and the route's handler runs as usual once the body is
 * complete; it must release rq->upload and set it to NULL.  When the
 * request ends any other way (client gone, shutdown) `abort` releases it. */
struct upload_sink {
    int (*begin)(struct request *rq, struct response *rs);
    void (*chunk)(struct request *rq, const char *data, size_t len);
    void (*abort)(struct request *rq);
};

struct request {
    struct server *srv;
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
    struct route_match match;     /* route index and captured ids */
    int route_status;             /* router_match's answer: 0, 400, 404, 405 */
    struct shoal_err route_err;
    struct buf body;              /* raw request body, capped */
    int body_too_large;
    struct http_hold hold;        /* the body's bytes, counted against its node and address */
    int hold_failed;              /* over their share of the bodies in flight: hold_err (429) */
    struct shoal_err hold_err;
    int framing_ambiguous;        /* 1: two Content-Lengths, or one with Transfer-Encoding (400);
                                     2: a Transfer-Encoding other than chunked (501) */
    int64_t node_id;              /* the caller's node, for AUTH_NODE routes (0: the admin) */
    int authed;                   /* authentication already passed (streamed uploads) */
    const struct upload_sink *sink; /* set for routes whose body is streamed */
    void *upload;                 /* the sink's state between begin and the handler */
    double started;               /* monotonic seconds */
    int status;                   /* status sent, for the log and metrics */
    deferred_fn defer_fn;         /* set by request_defer: work left for a thread */
    void *defer_arg;
    struct response *deferred;    /* a deferred or suspended request's response, sent once done */
    struct response *refused;     /* a refused upload's answer, sent once its body is read */
    atomic_int deferred_done;
    suspend_fn suspend_fn;        /* set by request_suspend: who finishes the request later */
    void *suspend_arg;
    int was_suspended;            /* counted in srv->suspended until it completes */
};

struct response {
    int status;
    json_t *json;                 /* body, owned; or NULL with text below */
    struct buf text;              /* raw body when json is NULL */
    const char *content_type;     /* for text and file bodies */
    char allow[64];               /* Allow header for 405 */
    int has_file;                 /* 1: the body is file_size bytes of file_fd (owned) */
    int file_fd;
    uint64_t file_size;           /* bytes */
    int close;                    /* 1: "Connection: close", the connection ends with this answer */
    const char *header_name;      /* one extra header, or NULL */
    char header_value[128];
};

/* Makes the body `size` bytes read from `fd` (taken over: closed when the
 * response is sent or dropped), never copied into memory whole. */
void reply_file(struct response *rs, int status, int fd, uint64_t size, const char *content_type);

/* Sets a JSON body and status; takes ownership of `body` (NULL -> 500). */
void reply_json(struct response *rs, int status, json_t *body);

/* Sets the error body {"error":{"code","message","field"}} and its status. */
void reply_error(struct response *rs, const struct shoal_err *err);

/* Shorthand for reply_error with a fresh error. */
void reply_fail(struct response *rs, int status, const char *code, const char *field,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Parses the body as a JSON object; on failure replies 400 and returns NULL. */
json_t *request_json(struct request *rq, struct response *rs);

/* Reads a query parameter, or NULL. */
const char *request_query(struct request *rq, const char *key);

/* Reads optional query parameter `key` into `*value` (NULL if absent).
 * Returns 0, or -1 after replying 400 if it is present but not one of
 * `choices` (NULL-terminated). */
int request_query_choice(struct request *rq, struct response *rs, const char *key,
                         const char *const *choices, const char **value);

/* Reads optional integer query parameter `key` (decimal, min..max) into
 * `*value`.  Returns 1 if present, 0 if absent (value untouched), or -1
 * after replying 400 invalid_field when it is not such a number. */
int request_query_int(struct request *rq, struct response *rs, const char *key, long long min,
                      long long max, long long *value);

/* Finishes the request on a thread of its own, so long work (a scheduler
 * search) holds no HTTP worker: after the handler returns, the connection
 * is suspended, fn(rq, rs, arg) runs on a new thread and fills the
 * response, then the connection resumes and the response is sent.  fn owns
 * `arg`; if the thread cannot start, fn(NULL, NULL, arg) is called to free it.  Returns 0, or -1 after replying 503 (and freeing nothing: the
 * caller keeps `arg`) when SERVER_MAX_DEFERRED requests are in flight. */
int request_defer(struct request *rq, struct response *rs, deferred_fn fn, void *arg);

/* Answers later without holding any thread: after the handler returns,
 * its response moves to the heap, the connection is suspended, and then
 * fn(rq, arg) runs on the thread that ran the handler to hand `rq` to
 * whoever finishes it with request_resume.  If that cannot be set up, fn(NULL, arg) is called
 * (to free `arg`) and the handler's response is sent at once.  Every
 * suspended request must be resumed before the daemon stops. */
void request_suspend(struct request *rq, suspend_fn fn, void *arg);

/* Finishes a suspended request: `body` (taken over; NULL keeps the response
 * the handler left) with `status`, then resumes the connection so it is
 * sent.  Any thread may call it; afterwards `rq` must not be touched. */
void request_resume(struct request *rq, int status, json_t *body);

/* Waits until no deferred request is running (at shutdown), up to `ms`. */
void http_wait_deferred(struct server *srv, int ms);

/* Waits until every request that was suspended has been sent (or its
 * client left), up to `ms`: at shutdown, after their owners resumed them,
 * so that stopping the daemon does not cut their answers off. */
void http_wait_suspended(struct server *srv, int ms);

/* Starts the HTTP daemon on cfg's address and port.  Writes the bound port
 * into `bound_port`.  Returns the daemon, or NULL with `err` set. */
struct MHD_Daemon *http_start(struct server *srv, unsigned *bound_port, struct shoal_err *err);

/* Stops the daemon started by http_start (NULL: none) and the thread
 * that enforces the request-head deadline. */
void http_stop(struct MHD_Daemon *d);

/* Stops the lanes' workers (router.h): requests still waiting for one are
 * answered 503 at once, those running finish.  At shutdown, before the
 * deferred requests and long-polls are waited for: a worker may hand a
 * request to either. */
void http_lanes_stop(struct server *srv);

/* Monotonic clock in seconds. */
double http_now(void);

#endif
