/* server.h - the running server's shared state, handed to every handler. */
#ifndef SHOAL_SERVER_H
#define SHOAL_SERVER_H

#include <stdatomic.h>

#include "../common/token.h"
#include "config.h"
#include "db.h"
#include "metrics.h"
#include "router.h"
#include "tls.h"

struct longpoll;
struct workq;

struct server {
    struct config cfg;
    struct db_pool *db;
    struct metrics *metrics;
    char admin_token[TOKEN_MAX];
    char join_token[TOKEN_MAX];
    atomic_int deferred;        /* requests finishing on threads of their own (scheduling) */
    struct longpoll *longpoll;  /* assignment long-polls and the database listener */
    atomic_int suspended;       /* requests suspended by request_suspend and not yet completed */
    struct tls_files tls;       /* HTTPS certificate and key; cert_pem NULL: plain HTTP */
    struct recovery *recovery;  /* the recovery thread, woken by failure reports */
    struct workq *lanes[ROUTE_LANES];   /* the workers of each route lane (http.c); NULL: inline */
};

/* At most this many deferred requests at once; more get 503 (2 cores here). */
#define SERVER_MAX_DEFERRED 2

#endif
