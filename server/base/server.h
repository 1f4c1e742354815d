/* server.h - the running server's shared state, handed to every handler. */
#ifndef SHOAL_SERVER_H
#define SHOAL_SERVER_H

#include <stdatomic.h>
#include <stddef.h>

#include "../../common/relay_ticket.h"
#include "../../common/token.h"
#include "config.h"
#include "tls.h"

struct db_pool;
struct longpoll;
struct metrics;
struct reach;
struct recovery;
struct relay_check;
struct workq;

/* Which threads run a route's handler (http.c): the threads that take
 * connections must never wait for the database. */
enum route_lane {
    LANE_DATABASE,   /* a database worker, for at most --db-timeout + 2 s in all (the default) */
    LANE_INLINE,     /* the HTTP thread: it never touches the database */
    LANE_PROBE,      /* a probe worker, with a few seconds for the database: /readyz, /metrics */
};
#define ROUTE_LANES 3
extern const char *const route_lane_names[ROUTE_LANES];   /* "database", "inline", "probe" (router.c) */

struct route;
struct upload_sink;

struct server {
    struct config cfg;
    struct db_pool *db;
    struct metrics *metrics;
    char admin_token[TOKEN_MAX];
    char join_token[TOKEN_MAX];
    struct relay_secret relay_secret;   /* shared with --relay; len 0: none (auth_load_relay_secret) */
    atomic_int deferred;        /* requests finishing on threads of their own (scheduling) */
    struct longpoll *longpoll;  /* assignment long-polls and the database listener */
    atomic_int suspended;       /* requests suspended by request_suspend and not yet completed */
    struct tls_files tls;       /* HTTPS certificate and key; cert_pem NULL: plain HTTP */
    struct recovery *recovery;  /* the recovery thread, woken by failure reports */
    struct reach *reach;        /* the peer-port reachability thread, woken by registrations */
    struct relay_check *relay;  /* does --relay answer? (relay_check.h); NULL: no relay */
    struct workq *lanes[ROUTE_LANES];   /* the workers of each route lane (http.c); NULL: inline */
    const struct route *routes;         /* the route table (routes.c), which http.c serves */
    size_t routes_count;
    /* The sink of route `index` when its body is streamed, else NULL (routes.c). */
    const struct upload_sink *(*upload_sink)(int index);
};

/* At most this many deferred requests at once; more get 503 (2 cores here). */
#define SERVER_MAX_DEFERRED 2

#endif
