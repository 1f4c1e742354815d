/* http_limits.c - what bounds a connection before shoal's handlers see a
 * request (see http_limits.h). */
#include "http_limits.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "../common/hex.h"
#include "../common/log.h"
#include "http.h"

#define HTTP_SPARE_CONNECTIONS 1024   /* connections beyond the long-polls, for ordinary requests */
#define HTTP_RESERVED_FDS 256         /* descriptors kept for everything but connections */

/* ---- the head deadline
 *
 * MHD calls nothing while a request's head (request line and headers)
 * arrives, and its idle timeout restarts with every byte, so a client
 * sending one byte a second would hold its connection for as long as it
 * likes.  Every connection is therefore listed from accept to close with
 * the time it began waiting for its next head, and a thread shuts down
 * the socket of any whose head has not completed within --idle-timeout +
 * --request-timeout seconds (a keep-alive wait, then the head itself).
 * MHD then sees the client "leave" and closes the connection as usual. */

struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    atomic_llong waiting_since_ms;   /* monotonic ms; 0 while a request is being handled */
};

/* One per process, like the daemon. */
static struct {
    pthread_mutex_t mu;               /* guards the list and every fd in it: MHD closes a
                                       * socket only after telling http_conn_notify */
    pthread_cond_t wake;
    struct http_conn *list;
    long long limit_ms;               /* the head deadline */
    int stop;
    int started;
    pthread_t thread;
} http_conns = { .mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static long long http_now_ms(void)
{
    return (long long)(http_now() * 1000.0);
}

void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    struct http_conn *c = *socket_context;
    pthread_mutex_lock(&http_conns.mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = info ? calloc(1, sizeof *c) : NULL;   /* without memory it goes unwatched */
        if (c) {
            c->fd = info->connect_fd;
            atomic_store(&c->waiting_since_ms, http_now_ms());
            c->next = http_conns.list;
            if (c->next)
                c->next->prev = c;
            http_conns.list = c;
        }
        *socket_context = c;
    } else if (c) {
        if (c->prev)
            c->prev->next = c->next;
        else
            http_conns.list = c->next;
        if (c->next)
            c->next->prev = c->prev;
        free(c);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&http_conns.mu);
}

void http_conn_mark(struct MHD_Connection *conn, int busy)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct http_conn *c = info ? info->socket_context : NULL;
    if (c)
        atomic_store(&c->waiting_since_ms, busy ? 0 : http_now_ms());
}

/* Shuts down every socket whose head is overdue.  Returns how many. */
static int http_conns_reap(void)
{
    int reaped = 0;
    long long now = http_now_ms();
    for (struct http_conn *c = http_conns.list; c; c = c->next) {
        long long since = atomic_load(&c->waiting_since_ms);
        if (since == 0 || now - since <= http_conns.limit_ms)
            continue;
        shutdown(c->fd, SHUT_RDWR);
        atomic_store(&c->waiting_since_ms, 0);   /* once */
        reaped++;
    }
    return reaped;
}

static void *http_conns_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&http_conns.mu);
    while (!http_conns.stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;   /* the deadline is kept to about a second */
        pthread_cond_timedwait(&http_conns.wake, &http_conns.mu, &until);
        int n = http_conns_reap();
        if (n > 0)
            log_warn("http closed %d connection(s) whose request head was still arriving after %lld s "
                     "(--idle-timeout + --request-timeout)", n, http_conns.limit_ms / 1000);
    }
    pthread_mutex_unlock(&http_conns.mu);
    return NULL;
}

int http_conns_start(const struct config *cfg, struct shoal_err *err)
{
    http_conns.limit_ms = (cfg->idle_timeout_s + cfg->request_timeout_s) * 1000LL;
    http_conns.stop = 0;
    int rc = pthread_create(&http_conns.thread, NULL, http_conns_main, NULL);
    if (rc != 0)
        return err_set(err, 1, "thread", NULL, "cannot start the request-head deadline thread: %s", strerror(rc));
    http_conns.started = 1;
    return 0;
}

void http_conns_stop(void)
{
    if (!http_conns.started)
        return;
    pthread_mutex_lock(&http_conns.mu);
    http_conns.stop = 1;
    pthread_cond_signal(&http_conns.wake);
    pthread_mutex_unlock(&http_conns.mu);
    pthread_join(http_conns.thread, NULL);
    http_conns.started = 0;
}

/* ---- request framing */

/* Counts the Content-Length headers for http_framing_ambiguous. */
static enum MHD_Result http_count_lengths(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
    (void)kind;
    (void)value;
    if (strcasecmp(key, "Content-Length") == 0)
        ++*(int *)cls;
    return MHD_YES;
}

int http_framing_ambiguous(struct MHD_Connection *conn)
{
    int lengths = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, http_count_lengths, &lengths);
    return lengths > 1 ||
           (lengths == 1 && MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding"));
}

/* ---- connections in all */

unsigned http_connection_limit(const struct config *cfg)
{
    struct rlimit rl;
    rlim_t want = cfg->max_connections > 0 ? (rlim_t)cfg->max_connections
                                               : (rlim_t)cfg->max_long_polls + HTTP_SPARE_CONNECTIONS;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return HTTP_SPARE_CONNECTIONS;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Descriptors for Postgres, the checkpoint files and the daemon itself. */
    rlim_t room = rl.rlim_cur > 2 * HTTP_RESERVED_FDS ? rl.rlim_cur - HTTP_RESERVED_FDS : rl.rlim_cur / 2;
    if (want > room) {
        log_warn("open-file limit %llu allows %llu connections, fewer than --max-connections %llu "
                 "(0 means --max-long-polls %ld + %d); raise it with ulimit -n",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)room, (unsigned long long)want,
                 cfg->max_long_polls, HTTP_SPARE_CONNECTIONS);
        want = room;
    }
    return (unsigned)want;
}

/* ---- URL decoding */

size_t http_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    char *out = s;
    const char *in = s;
    while (*in) {
        int hi, lo;
        if (in[0] == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0 && hi + lo > 0) {
            *out++ = (char)(hi * 16 + lo);
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return (size_t)(out - s);
}
