/* http_limits.c - what bounds a connection before shoal's handlers see a
 * request (see http_limits.h). */
#include "http_limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "../../common/hex.h"
#include "../../common/log.h"
#include "../../common/ticker.h"
#include "../../common/clock.h"
#include "../../common/hostport.h"
#include "auth.h"

#define HTTP_SPARE_CONNECTIONS 1024   /* connections beyond the long-polls, for ordinary requests */
#define HTTP_RESERVED_FDS 256         /* descriptors kept for everything but connections */
#define HTTP_REFUSED_LOG_EVERY_S 10.0 /* s between "refusing connections" lines */

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

#define HTTP_ADDR_BUCKETS 4096

#define HTTP_CLIENT_KEY 1         /* key[0] of a client address's entry */
#define HTTP_NODE_KEY 2           /* key[0] of a node's entry */

/* Connections and request body bytes held per client address (http_admit,
 * http_hold), and body bytes per node (connections 0).  An entry goes
 * when it holds neither. */
struct http_addr {
    struct http_addr *next;
    unsigned char key[HTTP_ADDR_KEY];
    int n;
    uint64_t body_bytes;
};

struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    unsigned char addr[HTTP_ADDR_KEY];   /* whose (http_addr_key) */
    atomic_llong waiting_since_ms;   /* monotonic ms; 0 while a request is being handled */
};

/* One per process, like the daemon. */
static struct {
    pthread_mutex_t mu;               /* guards the list and every fd in it: MHD closes a
                                       * socket only after telling http_conn_notify */
    struct http_conn *list;
    long long limit_ms;               /* the head deadline */
    struct ticker *reaper;            /* http_conns_reap once a second; NULL: not started */
    /* admission (http_admit) */
    struct http_addr *by_addr[HTTP_ADDR_BUCKETS];
    unsigned held, limit, per_address;   /* connections held; --max-connections, per address (0: none) */
    uint64_t node_bodies, address_bodies;   /* bytes of request bodies a node, an address may hold */
    atomic_ulong refused;
    double refused_logged;            /* monotonic s of the last "refused" line */
} http_conns = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* The client address as a key: its hostport_client_key after a tag byte
 * (which a node's key, http_node_key, has otherwise). */
static void http_addr_key(const struct sockaddr *sa, unsigned char key[HTTP_ADDR_KEY])
{
    key[0] = HTTP_CLIENT_KEY;
    (void)hostport_client_key(sa, key + 1);   /* no address, another family: all one key */
}

/* The key under which a node's request bodies are counted (http_hold). */
static void http_node_key(int64_t node_id, unsigned char key[HTTP_ADDR_KEY])
{
    memset(key, 0, HTTP_ADDR_KEY);
    key[0] = HTTP_NODE_KEY;
    memcpy(key + 1, &node_id, sizeof node_id);
}

/* The key's bucket (FNV-1a). */
static struct http_addr **http_addr_bucket(const unsigned char key[HTTP_ADDR_KEY])
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < HTTP_ADDR_KEY; i++)
        h = (h ^ key[i]) * 16777619u;
    return &http_conns.by_addr[h % HTTP_ADDR_BUCKETS];
}

/* The address's count (created at 0 when `make`), or NULL; the lock is held. */
static struct http_addr *http_addr_find(const unsigned char key[HTTP_ADDR_KEY], int make)
{
    struct http_addr **slot = http_addr_bucket(key);
    for (struct http_addr *a = *slot; a; a = a->next)
        if (memcmp(a->key, key, HTTP_ADDR_KEY) == 0)
            return a;
    struct http_addr *a = make ? calloc(1, sizeof *a) : NULL;
    if (a) {
        memcpy(a->key, key, HTTP_ADDR_KEY);
        a->next = *slot;
        *slot = a;
    }
    return a;
}

/* Frees entry `a` once it holds nothing; the lock is held. */
static void http_addr_drop_empty(struct http_addr *a)
{
    if (a->n > 0 || a->body_bytes > 0)
        return;
    for (struct http_addr **p = http_addr_bucket(a->key); *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            free(a);
            return;
        }
}

/* One connection more (+1) or fewer (-1) for the address; the lock is held. */
static void http_addr_count(const unsigned char key[HTTP_ADDR_KEY], int delta)
{
    struct http_addr *a = http_addr_find(key, delta > 0);
    if (!a)
        return;
    a->n += delta;
    http_conns.held += (unsigned)delta;
    http_addr_drop_empty(a);
}

static long long http_now_ms(void)
{
    return (long long)(mono_s() * 1000.0);
}

void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    struct http_conn *c = *socket_context;
    pthread_mutex_lock(&http_conns.mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *from = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        c = info ? calloc(1, sizeof *c) : NULL;   /* without memory it goes unwatched */
        if (c) {
            c->fd = info->connect_fd;
            http_addr_key(from ? from->client_addr : NULL, c->addr);
            http_addr_count(c->addr, +1);
            atomic_store(&c->waiting_since_ms, http_now_ms());
            c->next = http_conns.list;
            if (c->next)
                c->next->prev = c;
            http_conns.list = c;
        }
        *socket_context = c;
    } else if (c) {
        http_addr_count(c->addr, -1);
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

/* The deadline is kept to about a second. */
static void http_conns_tick(struct ticker *t, void *arg)
{
    (void)t, (void)arg;
    pthread_mutex_lock(&http_conns.mu);
    int n = http_conns_reap();
    pthread_mutex_unlock(&http_conns.mu);
    if (n > 0)
        log_warn("http closed %d connection(s) whose request head was still arriving after %lld s "
                 "(--idle-timeout + --request-timeout)", n, http_conns.limit_ms / 1000);
}

/* ---- admission
 *
 * Every connection is admitted or closed at accept (MHD's accept policy),
 * by the counts above.  An address at --max-connections-per-address is
 * refused, and one the server does not know (auth.h: no node's or admin's
 * token seen from it lately, not loopback) already at
 * HTTP_STRANGER_PER_ADDRESS.  Once --max-connections are held, strangers
 * are refused, and known addresses still get in while
 * HTTP_RESERVE_CONNECTIONS more are free.  So strangers, from however many
 * addresses, cannot take the last connections from the fleet and the
 * server's own host (/healthz, Prometheus), and what is refused is closed
 * at once instead of waiting in the listen queue. */

enum MHD_Result http_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)cls;
    (void)addrlen;
    unsigned char key[HTTP_ADDR_KEY];
    http_addr_key(addr, key);
    double now = mono_s();
    int known = auth_addr_known(addr, now);   /* before our lock: it takes its own */
    pthread_mutex_lock(&http_conns.mu);
    struct http_addr *a = http_addr_find(key, 0);
    unsigned mine = a ? (unsigned)a->n : 0, cap = http_conns.per_address;
    if (!known && (cap == 0 || cap > HTTP_STRANGER_PER_ADDRESS))
        cap = HTTP_STRANGER_PER_ADDRESS;
    int ok = (cap == 0 || mine < cap) &&
             (http_conns.held < http_conns.limit ||
              (known && http_conns.held < http_conns.limit + HTTP_RESERVE_CONNECTIONS));
    double last = http_conns.refused_logged;
    if (!ok && now - last >= HTTP_REFUSED_LOG_EVERY_S)
        http_conns.refused_logged = now;
    unsigned held = http_conns.held;
    pthread_mutex_unlock(&http_conns.mu);
    if (ok)
        return MHD_YES;
    atomic_fetch_add(&http_conns.refused, 1);
    if (now - last >= HTTP_REFUSED_LOG_EVERY_S) {
        char text[INET6_ADDRSTRLEN] = "?";
        if (addr && addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, text, sizeof text);
        else if (addr && addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, text, sizeof text);
        log_warn("http refusing connections: %s (%s) holds %u (it may hold %u: --max-connections-per-address "
                 "%u, %u for an address not known), %u are held in all (--max-connections %u, and %d more for "
                 "known addresses); %lu refused so far", text, known ? "known" : "not known", mine, cap,
                 http_conns.per_address, HTTP_STRANGER_PER_ADDRESS, held, http_conns.limit,
                 HTTP_RESERVE_CONNECTIONS, atomic_load(&http_conns.refused));
    }
    return MHD_NO;
}

/* ---- request bodies held */

void http_hold_start(struct http_hold *h, struct MHD_Connection *conn, int64_t node_id)
{
    const union MHD_ConnectionInfo *from = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    http_addr_key(from ? from->client_addr : NULL, h->addr);
    h->node_id = node_id;
    h->bytes = 0;
}

/* The entry of the hold's node (NULL: none) and address; the lock is held. */
static void http_hold_entries(const struct http_hold *h, struct http_addr **node, struct http_addr **addr)
{
    unsigned char key[HTTP_ADDR_KEY];
    *node = NULL;
    if (h->node_id > 0) {
        http_node_key(h->node_id, key);
        *node = http_addr_find(key, 1);
    }
    *addr = http_addr_find(h->addr, 1);
}

int http_hold_grow(struct http_hold *h, uint64_t bytes, struct shoal_err *err)
{
    struct http_addr *node, *addr;
    if (bytes <= h->bytes)
        return 0;
    uint64_t more = bytes - h->bytes;
    int rc = -1;
    pthread_mutex_lock(&http_conns.mu);
    http_hold_entries(h, &node, &addr);
    if (!addr || (h->node_id > 0 && !node)) {
        err_set(err, 503, "busy", NULL, "out of memory; retry shortly");
    } else if (node && node->body_bytes + more > http_conns.node_bodies) {
        err_set(err, 429, "bodies_in_flight", NULL,
                "node %lld already sends %llu bytes of request bodies that are not yet answered; with this one's "
                "%llu that is over the %llu a node may (%d x --max-body); finish or close those first",
                (long long)h->node_id, (unsigned long long)node->body_bytes, (unsigned long long)bytes,
                (unsigned long long)http_conns.node_bodies, HTTP_BODIES_PER_NODE);
    } else if (addr->body_bytes + more > http_conns.address_bodies) {
        err_set(err, 429, "bodies_in_flight", NULL,
                "this address already sends %llu bytes of request bodies that are not yet answered; with this "
                "one's %llu that is over the %llu an address may (%d x --max-body); finish or close those first",
                (unsigned long long)addr->body_bytes, (unsigned long long)bytes,
                (unsigned long long)http_conns.address_bodies, HTTP_BODIES_PER_ADDRESS);
    } else {
        if (node)
            node->body_bytes += more;
        addr->body_bytes += more;
        h->bytes = bytes;
        rc = 0;
    }
    if (rc != 0) {   /* entries made here for nothing */
        if (node)
            http_addr_drop_empty(node);
        if (addr)
            http_addr_drop_empty(addr);
    }
    pthread_mutex_unlock(&http_conns.mu);
    return rc;
}

void http_hold_release(struct http_hold *h)
{
    struct http_addr *node, *addr;
    if (h->bytes == 0)
        return;
    pthread_mutex_lock(&http_conns.mu);
    http_hold_entries(h, &node, &addr);
    if (node) {
        node->body_bytes -= h->bytes;
        http_addr_drop_empty(node);
    }
    if (addr) {
        addr->body_bytes -= h->bytes;
        http_addr_drop_empty(addr);
    }
    h->bytes = 0;
    pthread_mutex_unlock(&http_conns.mu);
}

void http_conns_counts(unsigned *held, unsigned long *refused)
{
    pthread_mutex_lock(&http_conns.mu);
    *held = http_conns.held;
    pthread_mutex_unlock(&http_conns.mu);
    *refused = atomic_load(&http_conns.refused);
}

int http_conns_start(const struct config *cfg, struct shoal_err *err)
{
    http_conns.limit_ms = (cfg->idle_timeout_s + cfg->request_timeout_s) * 1000LL;
    http_conns.limit = http_connection_limit(cfg);
    http_conns.per_address = (unsigned)cfg->max_connections_per_address;
    http_conns.node_bodies = (uint64_t)cfg->max_body * HTTP_BODIES_PER_NODE;
    http_conns.address_bodies = (uint64_t)cfg->max_body * HTTP_BODIES_PER_ADDRESS;
    http_conns.reaper = ticker_start("the request-head deadline thread", 1.0, http_conns_tick, NULL, err);
    return http_conns.reaper ? 0 : -1;
}

void http_conns_stop(void)
{
    ticker_stop(http_conns.reaper);
    http_conns.reaper = NULL;
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

int http_coding_unknown(struct MHD_Connection *conn)
{
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    if (!te)
        return 0;
    while (*te == ' ' || *te == '\t')
        te++;
    size_t n = strlen(te);
    while (n > 0 && (te[n - 1] == ' ' || te[n - 1] == '\t'))
        n--;
    return !(n == strlen("chunked") && strncasecmp(te, "chunked", n) == 0);
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
    /* Descriptors for Postgres, the checkpoint files, the daemon itself and
     * the reserve (http_admit). */
    rlim_t room = rl.rlim_cur > 2 * HTTP_RESERVED_FDS + HTTP_RESERVE_CONNECTIONS
                      ? rl.rlim_cur - HTTP_RESERVED_FDS - HTTP_RESERVE_CONNECTIONS : rl.rlim_cur / 2;
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
