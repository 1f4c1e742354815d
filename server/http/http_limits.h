/* http_limits.h - what bounds a connection before shoal's handlers see a
 * request: the request-head deadline, ambiguous framing, the connection
 * limits and admission, and URL decoding that keeps %00.  Internal to
 * http.c, which hands these to libmicrohttpd (/metrics reads the counts). */
#ifndef SHOAL_HTTP_LIMITS_H
#define SHOAL_HTTP_LIMITS_H

#include <microhttpd.h>
#include <stddef.h>
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
 * HTTP_RESERVE_CONNECTIONS more, for clients that hold few (http_admit). */
unsigned http_connection_limit(const struct config *cfg);
#define HTTP_RESERVE_CONNECTIONS 64   /* connections past the limit for light clients */
#define HTTP_RESERVE_PER_ADDRESS 8    /* "few": a prober, an agent's heartbeats and long-poll */

/* MHD's accept policy: admits the connection (MHD_YES) or has it closed at
 * once (MHD_NO) by --max-connections-per-address and --max-connections,
 * keeping the reserve above for clients that hold few; refusals are
 * counted and logged every 10 s. */
enum MHD_Result http_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* Connections held now, and refused at accept since the start (/metrics). */
void http_conns_counts(unsigned *held, unsigned long *refused);

/* MHD_OPTION_UNESCAPE_CALLBACK: MHD's URL decoding (%XX, in place), except
 * that %00 stays as it is: the path and query values reach the handlers as
 * C strings, and a decoded NUL would cut "/app.js%00.txt" down to
 * "/app.js".  Returns the new length. */
size_t http_unescape(void *cls, struct MHD_Connection *conn, char *s);

#endif
