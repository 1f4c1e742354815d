/* peer_dial.c - dialing a peer: the connect with its deadline, the
 * dialer's side of the hello on one of the tasklet's links (protocol in
 * peer.h), and the table of those links and their keys. */
#include "peer.h"

#include "peer_internal.h"

#include "../../common/log.h"
#include "../../common/relay_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Non-blocking connect to one address, waited for in poll until deadline.
 * Returns the fd (blocking mode again) or -1 with err set. */
static int connect_one(const struct addrinfo *ai, const char *addr, int64_t deadline,
                       int timeout_ms, struct shoal_err *err)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return err_set(err, 500, "peer_io", NULL, "cannot connect to peer %s: socket: %s", addr,
                       strerror(errno));
    peer_socket_tune(fd); /* buffers before connect, so the window scale covers them */
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
        err_set(err, PEER_STATUS, "peer_io", NULL, "cannot connect to peer %s: %s", addr,
                strerror(errno));
        goto out;
    }
    while (rc != 0) {
        int64_t left = deadline - peer_now_ms();
        if (left <= 0) {
            err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                    "cannot connect to peer %s within %d ms", addr, timeout_ms);
            goto out;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR) {
            err_set(err, 500, "peer_io", NULL, "poll failed: %s", strerror(errno));
            goto out;
        }
        if (n <= 0)
            continue;
        int so = 0;
        socklen_t len = sizeof so;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0)
            so = errno;
        if (so) {
            err_set(err, PEER_STATUS, "peer_io", NULL, "cannot connect to peer %s: %s", addr,
                    strerror(so));
            goto out;
        }
        rc = 0;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        err_set(err, 500, "peer_io", NULL, "fcntl: %s", strerror(errno));
        goto out;
    }
    return fd;
out:
    close(fd);
    return -1;
}

int peer_auth_link(struct peer_auth *a, const char *role, const void *key, size_t key_len)
{
    size_t role_len = strnlen(role, PEER_ROLE_MAX);
    struct peer_link *l = (struct peer_link *)peer_auth_find(a, role);
    if (!wire_role_ok(role, role_len) || key_len < 1 || key_len > PEER_KEY_MAX)
        return -1;
    if (!l) {
        if (a->n_links >= PEER_LINKS_MAX)
            return -1;
        l = &a->links[a->n_links++];
    }
    memcpy(l->role, role, role_len + 1);
    memcpy(l->key, key, key_len);
    l->key_len = key_len;
    return 0;
}

const struct peer_link *peer_auth_find(const struct peer_auth *a, const char *role)
{
    for (int i = 0; i < a->n_links && i < PEER_LINKS_MAX; i++)
        if (strcmp(a->links[i].role, role) == 0)
            return &a->links[i];
    return NULL;
}

/* The dialer's side of the hello (protocol in peer.h); c is connected and
 * has read the listener's nonce. */
static int dial_hello(struct peer_conn *c, const unsigned char lnonce[WIRE_NONCE_BYTES],
                      const struct peer_auth *auth, const char *want_role, unsigned channel,
                      const struct peer_io *io, struct shoal_err *err)
{
    unsigned char out[WIRE_HELLO_MAX], in[ERROR_TEXT_MAX], mac[WIRE_MAC_BYTES];
    struct wire_hello hello = {.flags = (auth->encrypt ? WIRE_HELLO_ENCRYPT : 0) | WIRE_HELLO_CHANNEL(channel)},
                      answer;
    size_t role_len = strnlen(auth->role, PEER_ROLE_MAX);
    char quoted[160], why[128];
    struct wire_frame f;

    const struct peer_link *link = peer_auth_find(auth, want_role);   /* peer_dial checked it */
    if (!wire_role_ok(auth->role, role_len))
        return err_set(err, 500, "peer_auth", NULL, "cannot dial %s: our role is malformed", c->addr);
    if (peer_random(hello.nonce, sizeof hello.nonce, err) != 0)
        return -1;
    memcpy(hello.role, auth->role, role_len + 1);
    wire_hello_mac(link->key, link->key_len, lnonce, auth->job_id, auth->epoch,
                   hello.flags, auth->role, hello.mac);
    c->job_id = auth->job_id;
    c->epoch = auth->epoch;
    c->channel = channel;
    f = (struct wire_frame){.kind = WIRE_HELLO, .dtype = WIRE_BYTES,
                            .payload_len = wire_hello_encode(&hello, 1, out)};
    if (peer_send_io(c, &f, out, 0, io, err) != 0)
        return -1;

    if (peer_recv_io(c, &f, in, sizeof in, 0, io, err) != 0) {
        if (strcmp(err->code, "peer_closed") == 0)
            return err_set(err, PEER_STATUS, "peer_auth", NULL,
                           "peer %s closed the connection after our hello for job %lld epoch %u "
                           "(handshake refused)",
                           c->addr, (long long)auth->job_id, auth->epoch);
        return -1;
    }
    if (f.kind == WIRE_ERROR) {
        peer_quote(in, f.payload_len, quoted, sizeof quoted);
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s refused our hello for job %lld epoch %u: %s", c->addr,
                       (long long)auth->job_id, auth->epoch, quoted);
    }
    if (f.kind != WIRE_HELLO || f.job_id != auth->job_id || f.epoch != auth->epoch ||
        wire_hello_decode(in, f.payload_len, 0, &answer, why, sizeof why) != 0)
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s answered our hello for job %lld epoch %u with a malformed frame "
                       "(kind %u job %lld epoch %u, %llu bytes)",
                       c->addr, (long long)auth->job_id, auth->epoch, f.kind,
                       (long long)f.job_id, f.epoch, (unsigned long long)f.payload_len);
    snprintf(c->role, sizeof c->role, "%s", answer.role);
    wire_hello_mac(link->key, link->key_len, hello.nonce, auth->job_id, auth->epoch,
                   answer.flags, answer.role, mac);
    if (!wire_mac_equal(mac, answer.mac))
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s (role '%s') failed to prove the key of our link in job %lld (or "
                       "its answer was altered on the way)",
                       c->addr, c->role, (long long)auth->job_id);
    if (strcmp(c->role, want_role) != 0)
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s proved role '%s', but we dialed it as '%s'", c->addr, c->role,
                       want_role);
    if ((hello.flags & WIRE_HELLO_ENCRYPT) && !(answer.flags & WIRE_HELLO_ENCRYPT))
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s (role '%s') would not encrypt the connection we asked to "
                       "encrypt", c->addr, c->role);
    if (answer.flags & WIRE_HELLO_ENCRYPT)
        return peer_seal_start(c, auth, link, lnonce, hello.nonce, auth->role, answer.role, 1, err);
    return 0;
}

/* The greeting and hello on c, connected; moves c into *out on success. */
static int greeted(struct peer_conn *c, const struct peer_auth *auth, const char *want_role, unsigned channel,
                   const struct peer_io *io, struct peer_conn *out, struct shoal_err *err)
{
    unsigned char lnonce[WIRE_NONCE_BYTES];
    struct wire_frame f;
    /* The listener speaks first: HELLO, job 0, its nonce. */
    if (peer_recv_io(c, &f, lnonce, sizeof lnonce, 1, io, err) != 0)
        return -1;
    if (f.kind != WIRE_HELLO || f.payload_len != WIRE_NONCE_BYTES)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s did not greet with a hello (kind %u, %llu bytes)", c->addr, f.kind,
                       (unsigned long long)f.payload_len);
    if (auth && dial_hello(c, lnonce, auth, want_role, channel, io, err) != 0)
        return -1;
    peer_conn_move(out, c);
    return 0;
}

/* peer_dial_channel on a connected socket (fd >= 0) or a new connection to
 * addr (fd -1). */
static int dial(int fd, const char *addr, const struct peer_auth *auth, const char *want_role, unsigned channel,
                int timeout_ms, struct peer_conn *out, struct shoal_err *err)
{
    struct addrinfo *res = NULL;
    struct peer_conn c = {.fd = fd};
    struct shoal_err local;
    int rc = -1;

    if (!err)
        err = &local;
    memset(out, 0, sizeof *out);
    out->fd = -1;
    snprintf(c.addr, sizeof c.addr, "%s", addr);
    if (auth && (!want_role || !peer_auth_find(auth, want_role) || channel >= WIRE_CHANNELS)) {
        err_set(err, 500, "peer_auth", NULL, "cannot dial %s as '%s' (channel %u): this tasklet has no link to that role (or no such channel)",
                addr, want_role ? want_role : "(no role)", channel);
        goto out;
    }
    struct peer_io io = peer_io_make(timeout_ms, -1);
    if (c.fd < 0 && peer_resolve(addr, 0, &res, err) != 0)
        goto out;
    for (struct addrinfo *ai = res; ai && c.fd < 0; ai = ai->ai_next) {
        c.fd = connect_one(ai, addr, io.deadline_ms, timeout_ms, err);
        if (c.fd < 0 && strcmp(err->code, "peer_timeout") == 0)
            goto out;
    }
    if (c.fd < 0 || greeted(&c, auth, want_role, channel, &io, out, err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0 && auth && strcmp(err->code, "peer_auth") == 0)
        log_warn("peer: handshake with %s failed: %s", addr, err->message);
    peer_close(&c);
    if (res)
        freeaddrinfo(res);
    return rc;
}

int peer_dial(const char *addr, const struct peer_auth *auth, const char *want_role,
              int timeout_ms, struct peer_conn *out, struct shoal_err *err)
{
    return dial(-1, addr, auth, want_role, WIRE_CHANNEL_STAGE, timeout_ms, out, err);
}

int peer_dial_channel(const char *addr, const struct peer_auth *auth, const char *want_role, unsigned channel,
                      int timeout_ms, struct peer_conn *out, struct shoal_err *err)
{
    return dial(-1, addr, auth, want_role, channel, timeout_ms, out, err);
}

int peer_dial_fd(int fd, const char *addr, const struct peer_auth *auth, const char *want_role, unsigned channel,
                 int timeout_ms, struct peer_conn *out, struct shoal_err *err)
{
    return dial(fd, addr, auth, want_role, channel, timeout_ms, out, err);
}

int peer_relay_open(const char *relay, const struct relay_ticket *ticket, const unsigned char token[WIRE_MAC_BYTES],
                    int timeout_ms, struct shoal_err *err)
{
    struct addrinfo *res = NULL;
    struct relay_request rq = { .side = ticket->side, .ticket = *ticket };
    unsigned char out[RELAY_REQUEST_BYTES];
    int fd = -1;
    int64_t deadline = peer_deadline(timeout_ms);
    memcpy(rq.token, token, RELAY_TOKEN_BYTES);
    relay_request_encode(&rq, out);
    if (peer_resolve(relay, 0, &res, err) != 0)
        return -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = connect_one(ai, relay, deadline, timeout_ms, err);
        if (fd < 0 && strcmp(err->code, "peer_timeout") == 0)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        err_set(err, err->status, err->code, NULL, "cannot reach relay %s: %s", relay, why);
        return -1;
    }
    if (send(fd, out, sizeof out, MSG_NOSIGNAL) != (ssize_t)sizeof out) {
        err_set(err, PEER_STATUS, "peer_io", NULL, "cannot send our request to relay %s: %s", relay,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int peer_dial_relayed(const char *relay, const struct relay_ticket *ticket, const struct peer_auth *auth,
                      const char *want_role, unsigned channel, int timeout_ms, struct peer_conn *out,
                      struct shoal_err *err)
{
    unsigned char token[WIRE_MAC_BYTES];
    const struct peer_link *link = peer_auth_find(auth, want_role);
    char addr[sizeof out->addr];
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!link)
        return err_set(err, 500, "peer_auth", NULL, "cannot dial '%s' through relay %s: this tasklet has no such "
                       "link", want_role, relay);
    if (ticket->side != RELAY_SIDE_DIALER || ticket->channel != channel)
        return err_set(err, 500, "bad_assignment", NULL, "cannot dial '%s' through relay %s: the ticket is a %s's "
                       "on channel %u, not a dialer's on %u", want_role, relay, relay_side_name(ticket->side),
                       ticket->channel, channel);
    wire_relay_token(link->key, link->key_len, auth->job_id, auth->epoch, channel, auth->role, want_role, token);
    int64_t deadline = peer_deadline(timeout_ms);
    int fd = peer_relay_open(relay, ticket, token, timeout_ms, err);
    if (fd < 0)
        return -1;
    if (relay_wait_paired(fd, relay, (int)(deadline - peer_now_ms()), -1, err) != 0) {
        close(fd);
        return -1;
    }
    snprintf(addr, sizeof addr, "relay %s", relay);
    int64_t left = deadline - peer_now_ms();
    /* always sealed: the relay must learn nothing and change nothing unseen */
    struct peer_auth sealed = *auth;
    sealed.encrypt = 1;
    int rc = peer_dial_fd(fd, addr, &sealed, want_role, channel, left < PEER_HANDSHAKE_MS ? PEER_HANDSHAKE_MS : (int)left,
                          out, err);
    OPENSSL_cleanse(&sealed, sizeof sealed);   /* the link keys */
    return rc;
}
