/* http_limits.h - what bounds a connection before shoal's handlers see a
 * request: the request-head deadline, ambiguous framing, the connection
 * limits and admission, and URL decoding that keeps %00.  Internal to
 * http.c, which hands these to libmicrohttpd (/metrics reads the counts). */
#ifndef SHOAL_HTTP_LIMITS_H
#define SHOAL_HTTP_LIMITS_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../../common/err.h"
#include "../base/config.h"

/* MHD_OPTION_NOTIFY_CONNECTION: lists a connection from accept to close. */
void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);

/* Marks the connection's head complete (`busy`: no deadline while it is
 * handled), or its wait for the next head begun. */
void http_conn_mark(struct MHD_Connection *conn, int busy);

/* Starts the thread that shuts down connections whose head is still
 * arriving --idle-timeout + --request-timeout seconds after they began
 * waiting for it.  Returns 0, or -1 with `err` set. */
int http_conns_start(const struct config *cfg, struct shoal_err *err);

/* Stops it (after the daemon: no connection is left); safe if not started. */
void http_conns_stop(void);

/* 1 if the body's length is given twice: two Content-Length headers, or
 * one beside Transfer-Encoding.  A proxy in front may frame such a request
 * differently from this server (request smuggling), so it is refused. */
int http_framing_ambiguous(struct MHD_Connection *conn);

/* 1 if the request names a Transfer-Encoding other than "chunked" alone
 * ("identity", "gzip, chunked"): its body cannot be framed, so it is
 * answered 501 before any of it is read (RFC 9112, 6.1), and the
 * connection closed. */
int http_coding_unknown(struct MHD_Connection *conn);

/* Connections held at once: --max-connections, or every long-poll the
 * config allows plus room for ordinary requests, within the open-file
 * limit (raised to its hard maximum first, since each connection is a
 * descriptor); a clipped limit is logged.  MHD itself may hold
 * HTTP_RESERVE_CONNECTIONS more, for known addresses (http_admit). */
unsigned http_connection_limit(const struct config *cfg);
#define HTTP_RESERVE_CONNECTIONS 256   /* connections past the limit that only known addresses may take */
#define HTTP_STRANGER_PER_ADDRESS 64   /* connections an address not known may hold, at most */

/* MHD's accept policy: admits the connection (MHD_YES) or has it closed at
 * once (MHD_NO) by --max-connections-per-address and --max-connections,
 * keeping the reserve above for known addresses (auth.h: the fleet's,
 * loopback) and holding an address not known to HTTP_STRANGER_PER_ADDRESS;
 * refusals are counted and logged every 10 s. */
enum MHD_Result http_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* ---- request bodies held
 *
 * A buffered request body is memory the server holds until the request is
 * answered, and a client that stalls mid-body holds it until a timeout.
 * So the bytes held are counted per client address and per node (the
 * node whose token the request carries): at most HTTP_BODIES_PER_NODE x
 * --max-body a node and HTTP_BODIES_PER_ADDRESS x --max-body an address.
 * A request is counted its declared length when its headers are in (or
 * what arrived, chunked), until it completes. */
#define HTTP_BODIES_PER_NODE 4
#define HTTP_BODIES_PER_ADDRESS 16
#define HTTP_ADDR_KEY 17   /* bytes: a tag (client or node), then its hostport_client_key or node id */

struct http_hold {
    unsigned char addr[HTTP_ADDR_KEY];   /* the client's address */
    int64_t node_id;                     /* 0: no node (the admin, the join token) */
    uint64_t bytes;                      /* held and counted now */
};

/* Starts an empty hold for a request on `conn` by node `node_id` (0: none). */
void http_hold_start(struct http_hold *h, struct MHD_Connection *conn, int64_t node_id);

/* Grows what `h` holds to `bytes` in all (no-op if it holds as much).
 * Returns 0, or -1 with err set, holding what it held: 429
 * "bodies_in_flight" saying whose limit it would pass, 503 without
 * memory. */
int http_hold_grow(struct http_hold *h, uint64_t bytes, struct shoal_err *err);

/* Gives back all `h` holds (safe on an empty hold). */
void http_hold_release(struct http_hold *h);

/* Connections held now, and refused at accept since the start (/metrics). */
void http_conns_counts(unsigned *held, unsigned long *refused);

/* MHD_OPTION_UNESCAPE_CALLBACK: MHD's URL decoding (%XX, in place), except
 * that %00 stays as it is: the path and query values reach the handlers as
 * C strings, and a decoded NUL would cut "/app.js%00.txt" down to
 * "/app.js".  Returns the new length. */
size_t http_unescape(void *cls, struct MHD_Connection *conn, char *s);

#endif
