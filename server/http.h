/* http.h - the libmicrohttpd glue: requests in, JSON responses out.
 *
 * A request is read whole (body capped at --max-body), matched against the
 * route table, authenticated, and handed to its handler, which fills a
 * response with reply_json or reply_error.  Every request is logged and
 * counted once it completes. */
#ifndef SHOAL_HTTP_H
#define SHOAL_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../common/buf.h"
#include "../common/err.h"
#include "router.h"
#include "server.h"

struct response;
typedef void (*deferred_fn)(struct request *rq, struct response *rs, void *arg);

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
    int64_t node_id;              /* the caller's node, for AUTH_NODE routes */
    double started;               /* monotonic seconds */
    int status;                   /* status sent, for the log and metrics */
    deferred_fn defer_fn;         /* set by request_defer: work left for a thread */
    void *defer_arg;
    struct response *deferred;    /* that thread's response, sent once it is done */
    atomic_int deferred_done;
};

struct response {
    int status;
    json_t *json;                 /* body, owned; or NULL with text below */
    struct buf text;              /* raw body when json is NULL */
    const char *content_type;     /* for text bodies */
    char allow[64];               /* Allow header for 405 */
};

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

/* Finishes the request on a thread of its own, so long work (a scheduler
 * search) holds no HTTP worker: after the handler returns, the connection
 * is suspended, fn(rq, rs, arg) runs on a new thread and fills the
 * response, then the connection resumes and the response is sent.  fn owns
 * `arg`; if the thread cannot start, fn(NULL, NULL, arg) is called to free it.  Returns 0, or -1 after replying 503 (and freeing nothing: the
 * caller keeps `arg`) when SERVER_MAX_DEFERRED requests are in flight. */
int request_defer(struct request *rq, struct response *rs, deferred_fn fn, void *arg);

/* Waits until no deferred request is running (at shutdown), up to `ms`. */
void http_wait_deferred(struct server *srv, int ms);

/* Starts the HTTP daemon on cfg's address and port.  Writes the bound port
 * into `bound_port`.  Returns the daemon, or NULL with `err` set. */
struct MHD_Daemon *http_start(struct server *srv, unsigned *bound_port, struct shoal_err *err);

/* Monotonic clock in seconds. */
double http_now(void);

#endif
