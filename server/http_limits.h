/* http_limits.h - what bounds a connection before shoal's handlers see a
 * request: the request-head deadline, ambiguous framing, the connection
 * limit within the open-file limit, and URL decoding that keeps %00.
 * Internal to http.c, which hands these to libmicrohttpd. */
#ifndef SHOAL_HTTP_LIMITS_H
#define SHOAL_HTTP_LIMITS_H

#include <microhttpd.h>
#include <stddef.h>

#include "../common/err.h"
#include "config.h"

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

/* Connections MHD may hold: --max-connections, or every long-poll the
 * config allows plus room for ordinary requests, within the open-file
 * limit (raised to its hard maximum first, since each connection is a
 * descriptor); a clipped limit is logged. */
unsigned http_connection_limit(const struct config *cfg);

/* MHD_OPTION_UNESCAPE_CALLBACK: MHD's URL decoding (%XX, in place), except
 * that %00 stays as it is: the path and query values reach the handlers as
 * C strings, and a decoded NUL would cut "/app.js%00.txt" down to
 * "/app.js".  Returns the new length. */
size_t http_unescape(void *cls, struct MHD_Connection *conn, char *s);

#endif
