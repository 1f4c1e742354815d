/* relay_check.c - the server's own look at its relay (relay_check.h). */
#include "relay_check.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../common/hostport.h"
#include "../../common/log.h"

struct relay_check {
    pthread_mutex_t mu;
    char relay[262];                    /* host:port, --relay */
    int state;                          /* -1 not checked yet, 0 silent, 1 answered */
    char why[RELAY_CHECK_WHY_MAX];      /* state 0: why not */
    int64_t checked_ms;                 /* mono_ms() of the last check; 0: none */
};

struct relay_check *relay_check_new(const char *relay)
{
    if (!relay || !relay[0])
        return NULL;
    struct relay_check *rc = calloc(1, sizeof *rc);
    if (!rc)
        return NULL;
    pthread_mutex_init(&rc->mu, NULL);
    snprintf(rc->relay, sizeof rc->relay, "%s", relay);
    rc->state = -1;
    return rc;
}

void relay_check_free(struct relay_check *rc)
{
    if (!rc)
        return;
    pthread_mutex_destroy(&rc->mu);
    free(rc);
}

const char *relay_check_address(const struct relay_check *rc)
{
    return rc ? rc->relay : NULL;
}

/* Waits until fd is ready for `events` or the deadline; 0, or -1 with why. */
static int wait_fd(int fd, short events, int64_t deadline, const char *doing, char *why, size_t why_len)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        struct pollfd p = { .fd = fd, .events = events };
        if (left <= 0) {
            snprintf(why, why_len, "no answer within %d ms while %s", RELAY_CHECK_TIMEOUT_MS, doing);
            return -1;
        }
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            snprintf(why, why_len, "poll: %s", strerror(errno));
            return -1;
        }
    }
}

/* Connects to one of ai's addresses before the deadline; the socket, or -1
 * with why. */
static int connect_any(const struct addrinfo *ai, int64_t deadline, char *why, size_t why_len)
{
    for (; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, why_len, "socket: %s", strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            return fd;
        int err = errno;
        if (err == EINPROGRESS && wait_fd(fd, POLLOUT, deadline, "connecting", why, why_len) == 0) {
            socklen_t len = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            if (err == 0)
                return fd;
        }
        if (err != EINPROGRESS)
            snprintf(why, why_len, "connect: %s", strerror(err));
        close(fd);
    }
    return -1;
}

int relay_check_ask(const char *addr, int timeout_ms, char *why, size_t why_len)
{
    static const char ask[] = "GET /healthz HTTP/1.0\r\n\r\n";
    char reason[HOSTPORT_WHY_MAX], head[64];
    struct addrinfo *ai = NULL;
    int64_t deadline = mono_ms() + timeout_ms;
    int fd = -1, ok = 0;
    size_t got = 0;
    enum hostport_verdict v = hostport_resolve(addr, &ai, reason, sizeof reason);
    if (v != HOSTPORT_OK) {
        snprintf(why, why_len, "%s", v == HOSTPORT_REFUSED ? reason : "its address does not resolve");
        goto out;
    }
    snprintf(why, why_len, "no address to connect to");
    fd = connect_any(ai, deadline, why, why_len);
    if (fd < 0)
        goto out;
    if (send(fd, ask, sizeof ask - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ask - 1)) {
        snprintf(why, why_len, "cannot ask it: %s", strerror(errno));
        goto out;
    }
    while (got < 12) {   /* "HTTP/1.1 200" */
        if (wait_fd(fd, POLLIN, deadline, "waiting for its answer", why, why_len) != 0)
            goto out;
        ssize_t n = read(fd, head + got, sizeof head - 1 - got);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            snprintf(why, why_len, "it closed the connection without an answer (not a shoal-relay?)");
            goto out;
        }
        got += (size_t)n;
    }
    head[got] = '\0';
    ok = strncmp(head, "HTTP/1.", 7) == 0 && strncmp(head + 8, " 200", 4) == 0;
    if (!ok)
        snprintf(why, why_len, "it answered GET /healthz with \"%.12s\", not 200 (not a shoal-relay?)", head);
out:
    if (fd >= 0)
        close(fd);
    if (ai)
        freeaddrinfo(ai);
    return ok;
}

int relay_check_now(struct relay_check *rc)
{
    char why[RELAY_CHECK_WHY_MAX] = "";
    if (!rc)
        return -1;
    int ok = relay_check_ask(rc->relay, RELAY_CHECK_TIMEOUT_MS, why, sizeof why);
    pthread_mutex_lock(&rc->mu);
    int was = rc->state;
    rc->state = ok;
    snprintf(rc->why, sizeof rc->why, "%s", ok ? "" : why);
    rc->checked_ms = mono_ms();
    pthread_mutex_unlock(&rc->mu);
    if (!ok && was != 0)
        log_warn("relay %s (--relay) does not answer: %s; links between nodes that cannot connect to each other "
                 "either way go through it, and no plan that needs one is made until it answers (start "
                 "shoal-relay there, or give --relay the address where it runs)", rc->relay, why);
    else if (ok && was == 0)
        log_info("relay %s (--relay) answers again", rc->relay);
    else if (ok && was < 0)
        log_info("relay %s (--relay) answers", rc->relay);
    return ok;
}

void relay_check_due(struct relay_check *rc)
{
    if (!rc)
        return;
    pthread_mutex_lock(&rc->mu);
    int due = rc->checked_ms == 0 || mono_ms() - rc->checked_ms >= (int64_t)(RELAY_CHECK_EVERY_S * 1000);
    pthread_mutex_unlock(&rc->mu);
    if (due)
        relay_check_now(rc);
}

int relay_check_state(struct relay_check *rc, char *why, size_t why_len)
{
    if (!rc)
        return -1;
    pthread_mutex_lock(&rc->mu);
    int s = rc->state;
    if (why && why_len)
        snprintf(why, why_len, "%s", rc->why);
    pthread_mutex_unlock(&rc->mu);
    return s;
}
