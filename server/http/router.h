/* router.h - matching a request's method and path against the route table.
 *
 * Patterns are written as the API documents them ("/v1/jobs/{id}"); the
 * "/v1" prefix is optional on both sides when matching, so "/v1/jobs" and
 * "/jobs" reach the same route.  "{id}" matches a positive decimal integer
 * (a row id), "{n}" one from 0 to 2^31 - 1 (a step or a stage); both are
 * captured.  The table itself lives in routes.c; this file only matches. */
#ifndef SHOAL_ROUTER_H
#define SHOAL_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../base/server.h"   /* enum route_lane */

struct request;
struct response;
typedef void (*handler_fn)(struct request *rq, struct response *rs);

enum auth_kind {
    AUTH_OPEN,    /* anyone */
    AUTH_ADMIN,   /* the admin token */
    AUTH_JOIN,    /* the join token (agent registration) */
    AUTH_NODE,    /* a node token; the request acts for that node */
    AUTH_ADMIN_OR_NODE, /* the admin token (node_id 0) or a node token (node_id set);
                           the handler decides what that node may see */
};

struct route {
    const char *method;    /* "GET", "POST", ... */
    const char *pattern;   /* "/v1/jobs/{id}"; also the route's label in logs and metrics */
    enum auth_kind auth;
    handler_fn fn;
    enum route_lane lane;
};

#define ROUTE_MAX_IDS 3

struct route_match {
    int index;                    /* into the table, -1 if none; on 400, the route with the
                                     path's shape and method, if any (for metrics and logs) */
    int64_t ids[ROUTE_MAX_IDS];   /* captured {id} and {n} values, in path order */
    int n_ids;
    char allow[64];               /* for 405: the methods the path accepts */
};

/* Finds the route for `method` and `path`.  Returns 0 on a match (m filled),
 * 404 if no pattern matches the path, 405 if one does but not for this
 * method (m->allow lists those that do), or 400 with `err` set when an
 * "{id}" or "{n}" segment is not a valid number (m->index then names the
 * route of that shape and method, or is -1 when no route has both: the
 * request is refused either way, but is counted under its route). */
int router_match(const struct route *table, size_t n, const char *method,
                 const char *path, struct route_match *m, struct shoal_err *err);

#endif
