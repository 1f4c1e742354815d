/* relay_ticket.c - the server's admission tickets for shoal-relay
 * (relay_ticket.h). */
#include "relay_ticket.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hex.h"
#include "wire.h"

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

const char *relay_side_name(int side)
{
    return side == RELAY_SIDE_DIALER ? "dialer" : side == RELAY_SIDE_LISTENER ? "listener"
           : side == RELAY_SIDE_PROBE ? "probe" : "unknown";
}

int relay_secret_set(const char *text, struct relay_secret *out, struct shoal_err *err)
{
    size_t n = strnlen(text, TOKEN_MAX);
    memset(out, 0, sizeof *out);
    if (!token_well_formed(text) || n < RELAY_SECRET_MIN)
        return err_set(err, 400, "bad_secret", NULL, "a relay secret is %d to %d printable characters without "
                       "spaces (%zu given)", RELAY_SECRET_MIN, TOKEN_MAX - 1, n);
    memcpy(out->key, text, n);
    out->len = n;
    return 0;
}

int relay_secret_load(const char *path, struct relay_secret *out, struct shoal_err *err)
{
    char text[TOKEN_MAX + 2];
    struct shoal_err why;
    int rc = -1, fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    memset(out, 0, sizeof *out);
    if (got < 0) {
        err_set(err, 400, "bad_secret_file", "secret_file", "cannot read the relay secret %s: %s", path,
                strerror(errno));
        goto out;
    }
    text[got] = '\0';
    text[strcspn(text, "\r\n")] = '\0';
    if (relay_secret_set(text, out, &why) != 0) {
        err_set(err, 400, "bad_secret_file", "secret_file", "%s does not hold a relay secret: %s", path,
                why.message);
        goto out;
    }
    rc = 0;
out:
    OPENSSL_cleanse(text, sizeof text);
    if (fd >= 0)
        close(fd);
    return rc;
}

void relay_ticket_encode(const struct relay_ticket *t, unsigned char out[RELAY_TICKET_BYTES])
{
    memset(out, 0, RELAY_TICKET_BYTES);
    out[0] = (unsigned char)t->side;
    out[1] = (unsigned char)t->channel;
    put_le(out + 4, t->epoch, 4);
    put_le(out + 8, (uint64_t)t->job_id, 8);
    put_le(out + 16, (uint64_t)t->expires, 8);
    put_le(out + 24, (uint32_t)t->dialer.stage, 4);
    put_le(out + 28, (uint32_t)t->dialer.replica, 4);
    put_le(out + 32, (uint64_t)t->dialer.node, 8);
    put_le(out + 40, (uint32_t)t->listener.stage, 4);
    put_le(out + 44, (uint32_t)t->listener.replica, 4);
    put_le(out + 48, (uint64_t)t->listener.node, 8);
    memcpy(out + RELAY_TICKET_FIELDS, t->mac, RELAY_TICKET_MAC_BYTES);
}

/* The MAC of t's fields under s. */
static void ticket_mac(const struct relay_secret *s, const struct relay_ticket *t,
                       unsigned char mac[RELAY_TICKET_MAC_BYTES])
{
    static const char label[] = "shoal-relay-ticket-v1";
    unsigned char msg[sizeof label - 1 + RELAY_TICKET_BYTES];
    unsigned int len = RELAY_TICKET_MAC_BYTES;
    memcpy(msg, label, sizeof label - 1);
    relay_ticket_encode(t, msg + sizeof label - 1);
    HMAC(EVP_sha256(), s->key, (int)s->len, msg, sizeof label - 1 + RELAY_TICKET_FIELDS, mac, &len);
}

void relay_ticket_sign(const struct relay_secret *s, struct relay_ticket *t)
{
    ticket_mac(s, t, t->mac);
}

static struct relay_end end_at(const unsigned char *p)
{
    return (struct relay_end){ .stage = (int32_t)(uint32_t)get_le(p, 4), .replica = (int32_t)(uint32_t)get_le(p + 4, 4),
                               .node = (int64_t)get_le(p + 8, 8) };
}

static int end_valid(const struct relay_end *e)
{
    return e->stage >= 0 && e->replica >= 0 && e->node >= 1;
}

int relay_ticket_decode(const unsigned char in[RELAY_TICKET_BYTES], struct relay_ticket *t, char *why,
                        size_t why_len)
{
    memset(t, 0, sizeof *t);
    t->side = in[0];
    t->channel = in[1];
    t->epoch = (uint32_t)get_le(in + 4, 4);
    uint64_t job = get_le(in + 8, 8), expires = get_le(in + 16, 8);
    t->dialer = end_at(in + 24);
    t->listener = end_at(in + 40);
    memcpy(t->mac, in + RELAY_TICKET_FIELDS, RELAY_TICKET_MAC_BYTES);
    if (in[2] || in[3]) {
        snprintf(why, why_len, "bad ticket: reserved bytes are not zero");
        return -1;
    }
    if (job > INT64_MAX || expires < 1 || expires > INT64_MAX) {
        snprintf(why, why_len, "bad ticket: job id or expiry out of range");
        return -1;
    }
    t->job_id = (int64_t)job;
    t->expires = (int64_t)expires;
    if (t->side == RELAY_SIDE_PROBE) {
        struct relay_end none = { 0 };
        if (t->job_id != 0 || t->epoch != 0 || t->channel != 0 || t->dialer.stage != 0 || t->dialer.replica != 0 ||
            t->dialer.node < 1 || memcmp(&t->listener, &none, sizeof none) != 0) {
            snprintf(why, why_len, "bad ticket: a probe's ticket names a node and nothing else");
            return -1;
        }
        return 0;
    }
    if (t->side != RELAY_SIDE_DIALER && t->side != RELAY_SIDE_LISTENER) {
        snprintf(why, why_len, "bad ticket: unknown side %d", t->side);
        return -1;
    }
    if (t->channel >= WIRE_CHANNELS) {
        snprintf(why, why_len, "bad ticket: unknown channel %u", t->channel);
        return -1;
    }
    if (t->job_id < 1 || !end_valid(&t->dialer) || !end_valid(&t->listener) ||
        (t->dialer.stage == t->listener.stage && t->dialer.replica == t->listener.replica)) {
        snprintf(why, why_len, "bad ticket: it names no job or not two tasklets");
        return -1;
    }
    return 0;
}

void relay_ticket_hex(const struct relay_ticket *t, char out[RELAY_TICKET_HEX])
{
    unsigned char b[RELAY_TICKET_BYTES];
    relay_ticket_encode(t, b);
    hex_encode(b, sizeof b, out);
}

int relay_ticket_from_hex(const char *hex, struct relay_ticket *t, char *why, size_t why_len)
{
    unsigned char b[RELAY_TICKET_BYTES];
    if (!hex || strnlen(hex, RELAY_TICKET_HEX) != RELAY_TICKET_HEX - 1 || hex_decode(hex, b, sizeof b) != 0) {
        snprintf(why, why_len, "a ticket is %d hex digits", RELAY_TICKET_HEX - 1);
        return -1;
    }
    return relay_ticket_decode(b, t, why, why_len);
}

int relay_ticket_verify(const struct relay_secret *s, const struct relay_ticket *t, int64_t now_s, char *why,
                        size_t why_len)
{
    unsigned char mac[RELAY_TICKET_MAC_BYTES];
    ticket_mac(s, t, mac);
    if (CRYPTO_memcmp(mac, t->mac, sizeof mac) != 0) {
        snprintf(why, why_len, "bad ticket: not signed with this relay's secret (--secret-file must hold the "
                 "server's relay.secret)");
        return -1;
    }
    if (t->expires <= now_s) {
        snprintf(why, why_len, "ticket expired %lld s ago: ask the server for the assignment again",
                 (long long)(now_s - t->expires));
        return -1;
    }
    return 0;
}

static int end_equal(const struct relay_end *a, const struct relay_end *b)
{
    return a->stage == b->stage && a->replica == b->replica && a->node == b->node;
}

int relay_ticket_same_link(const struct relay_ticket *a, const struct relay_ticket *b)
{
    return a->job_id == b->job_id && a->epoch == b->epoch && a->channel == b->channel &&
           end_equal(&a->dialer, &b->dialer) && end_equal(&a->listener, &b->listener);
}
