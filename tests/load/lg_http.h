/* lg_http.h - the load generator's HTTP/1.1 client connection: one
 * non-blocking, keep-alive socket that carries one request at a time,
 * driven by edge-triggered epoll.  Only what shoal-server answers is
 * understood: a status line, headers, and a body framed by Content-Length,
 * chunked transfer coding or the end of the connection. */
#ifndef LG_HTTP_H
#define LG_HTTP_H

#include <netinet/in.h>
#include <stddef.h>

#define LG_HTTP_MAX_RESPONSE (4u << 20)   /* bytes: a larger answer is a failure */
#define LG_HTTP_MAX_REQUEST 8192          /* bytes: request line, headers and body */

enum lg_conn_state {
    LC_CLOSED,      /* no socket */
    LC_IDLE,        /* connected, no request in flight */
    LC_BUSY,        /* a request in flight (connecting, sending or reading) */
};

/* What lg_conn_event says about the request in flight. */
enum lg_progress {
    LG_AGAIN,       /* still waiting */
    LG_DONE,        /* a whole response is in: lg_conn_status/lg_conn_body */
    LG_FAIL,        /* the connection failed; lg_conn_error says why, the socket is closed */
};

struct lg_conn {
    int fd;
    enum lg_conn_state state;
    int connecting;             /* connect() has not completed yet */
    int reused;                 /* the request went out on a connection that served one before */
    int got_bytes;              /* some of the response arrived */
    char out[LG_HTTP_MAX_REQUEST];
    size_t out_len, out_off;
    char *in;                   /* response bytes, grown up to LG_HTTP_MAX_RESPONSE */
    size_t in_len, in_cap;
    size_t header_len;          /* bytes of status line and headers; 0 until all are in */
    long long content_length;   /* -1: not given */
    int chunked, close_after;
    int status;                 /* HTTP status of the response */
    size_t body_off, body_len;  /* the body inside `in` (de-chunked in place) */
    char error[128];            /* why the last LG_FAIL happened */
    /* set by the owner, untouched here */
    void *owner;
    int role;
    unsigned long seq;          /* bumped by every lg_conn_send */
    double started;             /* monotonic s the request was queued */
};

void lg_conn_init(struct lg_conn *c, void *owner, int role);

/* Queues one request and starts sending it, opening a connection (bound to
 * `source` when its address is not INADDR_ANY) if there is none.  New
 * sockets are added to `epfd` with data.ptr = c.  `body` may be NULL.
 * Returns LG_AGAIN, or LG_FAIL with c->error set (nothing in flight). */
enum lg_progress lg_conn_send(struct lg_conn *c, int epfd, const struct sockaddr_in *server,
                              const struct sockaddr_in *source, const char *method, const char *path,
                              const char *token, const char *body);

/* Advances the request in flight after epoll reported `events` on c->fd. */
enum lg_progress lg_conn_event(struct lg_conn *c, unsigned events);

/* Closes the socket (if any); what was in flight is forgotten. */
void lg_conn_close(struct lg_conn *c);

/* Frees the response buffer and closes. */
void lg_conn_free(struct lg_conn *c);

/* After LG_DONE: the body as a NUL-terminated string owned by c (valid
 * until the next send), and its length. */
const char *lg_conn_body(const struct lg_conn *c, size_t *len);

#endif
