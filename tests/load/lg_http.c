/* lg_http.c - the load generator's HTTP/1.1 client connection (lg_http.h). */
#include "lg_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define LG_HTTP_READ_CHUNK 16384   /* bytes asked of each read() */

void lg_conn_init(struct lg_conn *c, void *owner, int role)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->owner = owner;
    c->role = role;
}

void lg_conn_close(struct lg_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);   /* also leaves every epoll set */
    c->fd = -1;
    c->state = LC_CLOSED;
    c->connecting = 0;
}

void lg_conn_free(struct lg_conn *c)
{
    lg_conn_close(c);
    free(c->in);
    c->in = NULL;
    c->in_cap = c->in_len = 0;
}

static enum lg_progress lg_fail(struct lg_conn *c, const char *what, int err)
{
    if (err)
        snprintf(c->error, sizeof c->error, "%s: %s", what, strerror(err));
    else
        snprintf(c->error, sizeof c->error, "%s", what);
    lg_conn_close(c);
    return LG_FAIL;
}

/* Opens a non-blocking socket towards `server` and starts connecting. */
static enum lg_progress lg_conn_open(struct lg_conn *c, int epfd, const struct sockaddr_in *server,
                                     const struct sockaddr_in *source)
{
    int one = 1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return lg_fail(c, "socket", errno);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (source && source->sin_addr.s_addr != htonl(INADDR_ANY) &&
        bind(c->fd, (const struct sockaddr *)source, sizeof *source) != 0)
        return lg_fail(c, "bind to the source address", errno);
    if (connect(c->fd, (const struct sockaddr *)server, sizeof *server) != 0) {
        if (errno != EINPROGRESS)
            return lg_fail(c, "connect", errno);
        c->connecting = 1;
    }
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c };
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return lg_fail(c, "epoll_ctl", errno);
    c->state = LC_IDLE;
    return LG_AGAIN;
}

/* Writes what is left of the request; LG_AGAIN also when all is written. */
static enum lg_progress lg_conn_flush(struct lg_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return LG_AGAIN;
            if (errno == EINTR)
                continue;
            return lg_fail(c, c->got_bytes || !c->reused ? "send" : "send on a reused connection", errno);
        }
        c->out_off += (size_t)n;
    }
    return LG_AGAIN;
}

enum lg_progress lg_conn_send(struct lg_conn *c, int epfd, const struct sockaddr_in *server,
                              const struct sockaddr_in *source, const char *method, const char *path,
                              const char *token, const char *body)
{
    c->reused = c->state == LC_IDLE;
    if (c->state == LC_CLOSED && lg_conn_open(c, epfd, server, source) != LG_AGAIN)
        return LG_FAIL;
    char host[32];
    size_t body_len = body ? strlen(body) : 0;
    inet_ntop(AF_INET, &server->sin_addr, host, sizeof host);
    int n = snprintf(c->out, sizeof c->out,
                     "%s %s HTTP/1.1\r\nHost: %s:%u\r\nUser-Agent: shoal-loadgen\r\n%s%s%s"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, path, host, ntohs(server->sin_port), token ? "Authorization: Bearer " : "",
                     token ? token : "", token ? "\r\n" : "", body ? "Content-Type: application/json\r\n" : "",
                     body_len, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof c->out) {
        snprintf(c->error, sizeof c->error, "request to %s is larger than %d bytes", path, LG_HTTP_MAX_REQUEST);
        c->reused = 0;   /* not the connection's fault: no retry */
        return LG_FAIL;   /* the connection stays as it was */
    }
    c->out_len = (size_t)n;
    c->out_off = 0;
    c->in_len = c->header_len = c->body_off = c->body_len = 0;
    c->content_length = -1;
    c->chunked = c->close_after = c->status = c->got_bytes = 0;
    c->seq++;
    c->state = LC_BUSY;
    return c->connecting ? LG_AGAIN : lg_conn_flush(c);
}

/* Parses the status line and the headers once "\r\n\r\n" is in. */
static int lg_parse_head(struct lg_conn *c)
{
    char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    *end = '\0';   /* restored below: the headers become one C string */
    c->header_len = (size_t)(end - c->in) + 4;
    int major, minor, status;
    if (sscanf(c->in, "HTTP/%d.%d %d", &major, &minor, &status) != 3 || status < 100 || status > 599) {
        *end = '\r';
        return -1;
    }
    c->status = status;
    if (major == 1 && minor == 0)
        c->close_after = 1;   /* HTTP/1.0 closes unless told otherwise; shoal-server speaks 1.1 */
    for (char *line = strstr(c->in, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, "Content-Length:", 15) == 0) {
            char *num_end;
            errno = 0;
            long long v = strtoll(line + 15, &num_end, 10);
            if (errno || v < 0 || num_end == line + 15) {
                *end = '\r';
                return -1;
            }
            c->content_length = v;
        } else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0) {
            c->chunked = strstr(line, "chunked") != NULL;
        } else if (strncasecmp(line, "Connection:", 11) == 0) {
            const char *v = line + 11;
            while (*v == ' ')
                v++;
            c->close_after = strncasecmp(v, "close", 5) == 0;
        }
    }
    *end = '\r';
    return 1;
}

/* For a chunked body: 1 and the body de-chunked in place once the last
 * chunk is in, 0 while it is not, -1 if it is malformed. */
static int lg_dechunk(struct lg_conn *c)
{
    size_t pos = c->header_len, total = 0;
    for (;;) {   /* first pass: is every chunk in? */
        char *eol = memmem(c->in + pos, c->in_len - pos, "\r\n", 2);
        if (!eol)
            return 0;
        char *hex_end;
        unsigned long long size = strtoull(c->in + pos, &hex_end, 16);
        if (hex_end == c->in + pos || size > LG_HTTP_MAX_RESPONSE)
            return -1;
        size_t data = (size_t)(eol - c->in) + 2;
        if (size == 0) {
            if (c->in_len < data + 2)
                return 0;
            break;   /* trailers are not sent by shoal-server */
        }
        if (c->in_len < data + size + 2)
            return 0;
        total += size;
        pos = data + size + 2;
    }
    size_t out = c->header_len;
    pos = c->header_len;
    for (size_t left = total; left > 0;) {   /* second pass: pack the chunks together */
        char *eol = memmem(c->in + pos, c->in_len - pos, "\r\n", 2);
        size_t size = (size_t)strtoull(c->in + pos, NULL, 16);
        size_t data = (size_t)(eol - c->in) + 2;
        memmove(c->in + out, c->in + data, size);
        out += size;
        left -= size;
        pos = data + size + 2;
    }
    c->body_off = c->header_len;
    c->body_len = total;
    c->in[c->body_off + total] = '\0';
    return 1;
}

/* 1 when the response is complete (eof: the server closed), 0 if not, -1 if malformed. */
static int lg_response_complete(struct lg_conn *c, int eof)
{
    if (!c->header_len) {
        int h = lg_parse_head(c);
        if (h <= 0)
            return h;
    }
    if (c->chunked)
        return lg_dechunk(c);
    size_t have = c->in_len - c->header_len;
    if (c->content_length >= 0) {
        if (have < (size_t)c->content_length)
            return 0;
        have = (size_t)c->content_length;
    } else if (!eof) {
        return 0;   /* framed by the end of the connection */
    }
    c->body_off = c->header_len;
    c->body_len = have;
    c->in[c->body_off + have] = '\0';
    return 1;
}

/* Reads all that is there; 1 at the end of the stream, 0 if the socket
 * would block, -1 on an error (c->error set, socket closed). */
static int lg_conn_read(struct lg_conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < LG_HTTP_READ_CHUNK + 1) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 2 * LG_HTTP_READ_CHUNK;
            if (cap > LG_HTTP_MAX_RESPONSE + LG_HTTP_READ_CHUNK + 1) {
                lg_fail(c, "response larger than the load generator accepts", 0);
                return -1;
            }
            char *in = realloc(c->in, cap);
            if (!in) {
                lg_fail(c, "out of memory", 0);
                return -1;
            }
            c->in = in;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            c->got_bytes = 1;
            continue;
        }
        if (n == 0)
            return 1;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno == EINTR)
            continue;
        lg_fail(c, c->got_bytes || !c->reused ? "recv" : "recv on a reused connection", errno);
        return -1;
    }
}

enum lg_progress lg_conn_event(struct lg_conn *c, unsigned events)
{
    if (c->fd < 0)
        return LG_AGAIN;
    if (c->state == LC_IDLE) {
        /* Nothing asked: the server closed a kept-alive connection, or said
         * something unasked for.  Either way it is not to be used again. */
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            lg_conn_close(c);
        return LG_AGAIN;
    }
    if (c->connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return LG_AGAIN;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err)
            return lg_fail(c, "connect", err);
        c->connecting = 0;
    }
    if (lg_conn_flush(c) == LG_FAIL)
        return LG_FAIL;
    int eof = lg_conn_read(c);
    if (eof < 0)
        return LG_FAIL;
    int done = c->in_len ? lg_response_complete(c, eof) : 0;
    if (done < 0)
        return lg_fail(c, "malformed HTTP response", 0);
    if (done) {
        if (c->close_after || eof)
            lg_conn_close(c);
        else
            c->state = LC_IDLE;
        return LG_DONE;
    }
    if (eof)
        return lg_fail(c, c->got_bytes ? "the server closed the connection mid-response"
                          : c->reused ? "the server closed a reused connection before answering"
                                      : "the server closed the connection before answering", 0);
    return LG_AGAIN;
}

const char *lg_conn_body(const struct lg_conn *c, size_t *len)
{
    if (len)
        *len = c->body_len;
    return c->in ? c->in + c->body_off : "";
}
