/* auth_addr.c - what the server remembers about client addresses (auth.h):
 * failed token attempts and registrations, each limited per address, and
 * the addresses that proved a token (known addresses, which connection
 * admission puts ahead of strangers).
 *
 * Each is a fixed-size table of addresses: a slot per address, found by its
 * hash and the next AUTH_ADDR_PROBES slots; when they are all taken the one
 * that matters for the shortest time is forgotten, so a flood of addresses
 * costs no memory.  Every function is thread-safe. */
#include "auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../common/clock.h"
#include "../../common/hostport.h"
#include "../../common/log.h"
#include "../store/db.h"

#define AUTH_ADDR_PROBES 8      /* slots one address may land in: its hash and the next 7 */
#define AUTH_KNOWN_SLOTS 65536  /* known addresses tracked at once: a large fleet, each node its own */

struct auth_slot {
    unsigned char key[HOSTPORT_KEY_BYTES];
    int used;
    long count;               /* events in the window that began at window_start */
    double window_start;      /* monotonic s */
    double until;             /* monotonic s: blocked (limiters) or known (auth_known) until then */
};

/* A table of addresses: a limiter (`max` events per `window_s`, then the
 * address is blocked for a window) or, with max 0 and window_s 0, a set
 * whose entries last until their `until`. */
struct auth_table {
    pthread_mutex_t mu;           /* guards slots */
    const char *what;             /* "failed token attempts", for the log */
    long max;                     /* 0: no limit; set before the daemon starts */
    double window_s;
    atomic_llong blocked_until_ms;   /* the latest block's end, ms: lets the usual "nobody is
                                      * blocked" answer skip the lock */
    size_t n_slots;
    struct auth_slot *slots;
};

static struct auth_slot failure_slots[AUTH_LIMIT_SLOTS], register_slots[AUTH_LIMIT_SLOTS],
                        known_slots[AUTH_KNOWN_SLOTS];
/* One each per process: a server runs one HTTP daemon. */
static struct auth_table auth_failures = { PTHREAD_MUTEX_INITIALIZER, "failed token attempts", 0, 60.0, 0,
                                           AUTH_LIMIT_SLOTS, failure_slots };
static struct auth_table auth_registrations = { PTHREAD_MUTEX_INITIALIZER, "registrations", 0, 60.0, 0,
                                                AUTH_LIMIT_SLOTS, register_slots };
static struct auth_table auth_known = { PTHREAD_MUTEX_INITIALIZER, "known addresses", 0, 0.0, 0,
                                        AUTH_KNOWN_SLOTS, known_slots };

/* Sets a limiter's limit and forgets every address. */
static void table_init(struct auth_table *t, long max, double window_s)
{
    pthread_mutex_lock(&t->mu);
    memset(t->slots, 0, t->n_slots * sizeof *t->slots);
    t->max = max > 0 ? max : 0;
    t->window_s = window_s;
    atomic_store(&t->blocked_until_ms, 0);
    pthread_mutex_unlock(&t->mu);
}

/* The address as text for the log ("?" if it has none). */
static void auth_addr_name(const struct sockaddr *from, char *out, socklen_t n)
{
    const void *a = NULL;
    if (from && from->sa_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)from)->sin_addr;
    else if (from && from->sa_family == AF_INET6)
        a = &((const struct sockaddr_in6 *)(const void *)from)->sin6_addr;
    if (!a || !inet_ntop(from->sa_family, a, out, n))
        snprintf(out, n, "?");
}

/* Until when (monotonic s) a slot still matters: its block or its window
 * (a limiter's), or until it is forgotten (a set's). */
static double slot_matters_until(const struct auth_table *t, const struct auth_slot *s)
{
    double window_end = s->window_start + t->window_s;
    return s->until > window_end ? s->until : window_end;
}

/* The slot holding `key`, or NULL if it holds none and `claim` is 0.  With
 * `claim` a missing key takes a free slot of its probe, else the one that
 * matters for the shortest time (forgetting it).  Caller holds the lock. */
static struct auth_slot *table_slot(struct auth_table *t, const unsigned char key[HOSTPORT_KEY_BYTES], int claim, double now)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (int i = 0; i < HOSTPORT_KEY_BYTES; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    size_t home = (size_t)(h % t->n_slots);
    struct auth_slot *victim = NULL;
    for (size_t i = 0; i < AUTH_ADDR_PROBES; i++) {
        struct auth_slot *s = &t->slots[(home + i) % t->n_slots];
        if (s->used && memcmp(s->key, key, HOSTPORT_KEY_BYTES) == 0)
            return s;
        if (victim && !victim->used)
            continue;
        if (!victim || !s->used || slot_matters_until(t, s) < slot_matters_until(t, victim))
            victim = s;
    }
    if (!claim)
        return NULL;
    memset(victim, 0, sizeof *victim);
    memcpy(victim->key, key, HOSTPORT_KEY_BYTES);
    victim->used = 1;
    victim->window_start = now;
    return victim;
}

/* 1 if `from` is blocked by limiter t at monotonic time `now` (s), with
 * the seconds until it is let through again in `*retry_after_s` (at least
 * 1); else 0.  An address that is not IPv4 or IPv6 (or NULL) is never
 * blocked. */
static int table_blocked(struct auth_table *t, const struct sockaddr *from, double now, long *retry_after_s)
{
    unsigned char key[HOSTPORT_KEY_BYTES];
    int blocked = 0;
    if (t->max == 0 || now * 1000.0 >= (double)atomic_load(&t->blocked_until_ms) || hostport_client_key(from, key) != 0)
        return 0;
    pthread_mutex_lock(&t->mu);
    struct auth_slot *s = table_slot(t, key, 0, now);
    if (s && s->until > now) {
        double left = s->until - now;   /* s */
        long whole = (long)left;
        *retry_after_s = whole < 1 ? 1 : whole + (left > (double)whole);
        blocked = 1;
    }
    pthread_mutex_unlock(&t->mu);
    return blocked;
}

/* Counts one event from `from` at monotonic time `now` (s) in limiter t;
 * the `max`-th within a window blocks the address for a window. */
static void table_count(struct auth_table *t, const struct sockaddr *from, double now)
{
    unsigned char key[HOSTPORT_KEY_BYTES];
    if (t->max == 0 || hostport_client_key(from, key) != 0)
        return;
    pthread_mutex_lock(&t->mu);
    struct auth_slot *s = table_slot(t, key, 1, now);
    if (now - s->window_start >= t->window_s) {
        s->window_start = now;
        s->count = 0;
    }
    if (++s->count >= t->max && s->until <= now) {
        s->until = now + t->window_s;
        long long until_ms = (long long)(s->until * 1000.0) + 1;
        if (until_ms > atomic_load(&t->blocked_until_ms))   /* only writers hold the lock */
            atomic_store(&t->blocked_until_ms, until_ms);
        char name[INET6_ADDRSTRLEN];
        auth_addr_name(from, name, sizeof name);
        log_warn("auth: %ld %s within %.0f s from address=%s; refusing it for %.0f s", s->count, t->what,
                 t->window_s, name, t->window_s);
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---- failed token attempts */

void auth_limit_init(long failures, long window_s)
{
    table_init(&auth_failures, failures, (double)window_s);
}

int auth_limit_blocked(const struct sockaddr *from, double now, long *retry_after_s)
{
    return table_blocked(&auth_failures, from, now, retry_after_s);
}

void auth_limit_failed(const struct sockaddr *from, double now)
{
    table_count(&auth_failures, from, now);
}

/* ---- registrations */

int auth_loopback(const struct sockaddr *from)
{
    static const unsigned char v4_loopback[4] = { 127, 0, 0, 1 };
    if (from && from->sa_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)(const void *)from)->sin_addr, v4_loopback, 4) == 0;
    if (!from || from->sa_family != AF_INET6)
        return 0;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)from)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && memcmp(a->s6_addr + 12, v4_loopback, 4) == 0);
}

void auth_register_init(long per_minute)
{
    table_init(&auth_registrations, per_minute, AUTH_REGISTER_WINDOW_S);
}

int auth_register_admit(const struct sockaddr *from, double now, long *retry_after_s)
{
    if (auth_loopback(from))
        return 0;
    if (table_blocked(&auth_registrations, from, now, retry_after_s))
        return -1;
    table_count(&auth_registrations, from, now);
    return 0;
}

/* ---- known addresses */

void auth_addr_seen(const struct sockaddr *from, double now)
{
    unsigned char key[HOSTPORT_KEY_BYTES];
    if (hostport_client_key(from, key) != 0)
        return;
    pthread_mutex_lock(&auth_known.mu);
    table_slot(&auth_known, key, 1, now)->until = now + AUTH_KNOWN_S;
    pthread_mutex_unlock(&auth_known.mu);
}

int auth_addr_known(const struct sockaddr *from, double now)
{
    unsigned char key[HOSTPORT_KEY_BYTES];
    if (auth_loopback(from))
        return 1;
    if (hostport_client_key(from, key) != 0)
        return 0;
    pthread_mutex_lock(&auth_known.mu);
    const struct auth_slot *s = table_slot(&auth_known, key, 0, now);
    int known = s && s->until > now;
    pthread_mutex_unlock(&auth_known.mu);
    return known;
}

/* Marks the numeric host of peer address `addr` ("host:port") seen; a
 * name, or anything else, is passed over.  Returns 1 if it was marked. */
static int auth_addr_seen_peer(const char *addr, double now)
{
    char host[128], port[8];
    struct sockaddr_in a4 = { .sin_family = AF_INET };
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
    if (!addr || hostport_split(addr, host, sizeof host, port, sizeof port) != 0)
        return 0;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1)
        auth_addr_seen((const struct sockaddr *)&a4, now);
    else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1)
        auth_addr_seen((const struct sockaddr *)&a6, now);
    else
        return 0;
    return 1;
}

int auth_addr_load(struct server *srv, struct shoal_err *err)
{
    size_t i;
    json_t *addr;
    int marked = 0;
    double now = mono_s();
    json_t *res = db_query_json(srv->db,
        "SELECT coalesce(json_agg(peer_address), '[]') FROM nodes WHERE removed_at IS NULL", 0, NULL, "nodes", err);
    if (!res)
        return -1;
    json_array_foreach(res, i, addr)
        marked += auth_addr_seen_peer(json_string_value(addr), now);
    log_info("auth: %d registered node address(es) count as known to connection admission until their nodes "
             "are heard from", marked);
    json_decref(res);
    return 0;
}
