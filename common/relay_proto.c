/* relay_proto.c - the relay's request and reply (relay_proto.h). */
#include "relay_proto.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "relay_ticket.h"

static const char magic[8] = { 'S', 'H', 'O', 'A', 'L', 'R', 'L', 'Y' };

void relay_request_encode(const struct relay_request *r, unsigned char out[RELAY_REQUEST_BYTES])
{
    memset(out, 0, RELAY_REQUEST_BYTES);
    memcpy(out, magic, sizeof magic);
    out[8] = RELAY_VERSION;
    out[9] = (unsigned char)r->side;
    relay_ticket_encode(&r->ticket, out + RELAY_HEADER_BYTES);
    memcpy(out + RELAY_HEADER_BYTES + RELAY_TICKET_BYTES, r->token, RELAY_TOKEN_BYTES);
}

int relay_request_header(const unsigned char in[RELAY_HEADER_BYTES], char *why, size_t why_len)
{
    static const unsigned char zero[6] = { 0 };
    if (memcmp(in, magic, sizeof magic) != 0) {
        snprintf(why, why_len, "not a relay request");
        return -1;
    }
    if (in[8] != RELAY_VERSION) {
        snprintf(why, why_len, "relay protocol version %u, this relay speaks %d: run agents and relay of one "
                 "release", in[8], RELAY_VERSION);
        return -1;
    }
    if (in[9] != RELAY_SIDE_DIALER && in[9] != RELAY_SIDE_LISTENER && in[9] != RELAY_SIDE_PROBE) {
        snprintf(why, why_len, "unknown side %u", in[9]);
        return -1;
    }
    if (memcmp(in + 10, zero, sizeof zero) != 0) {
        snprintf(why, why_len, "reserved bytes are not zero");
        return -1;
    }
    return 0;
}

int relay_request_decode(const unsigned char in[RELAY_REQUEST_BYTES], struct relay_request *r, char *why,
                         size_t why_len)
{
    memset(r, 0, sizeof *r);
    if (relay_request_header(in, why, why_len) != 0 ||
        relay_ticket_decode(in + RELAY_HEADER_BYTES, &r->ticket, why, why_len) != 0)
        return -1;
    r->side = in[9];
    if (r->ticket.side != r->side) {
        snprintf(why, why_len, "wrong side: the ticket admits the %s's end, the request is the %s's",
                 relay_side_name(r->ticket.side), relay_side_name(r->side));
        return -1;
    }
    memcpy(r->token, in + RELAY_HEADER_BYTES + RELAY_TICKET_BYTES, RELAY_TOKEN_BYTES);
    return 0;
}

void relay_reply_encode(char status, const char *text, unsigned char out[RELAY_REPLY_BYTES])
{
    memset(out, 0, RELAY_REPLY_BYTES);
    out[0] = (unsigned char)status;
    snprintf((char *)out + 1, RELAY_REPLY_BYTES - 1, "%s", text ? text : "");
}

int relay_wait_paired(int fd, const char *relay, int timeout_ms, int cancel_fd, struct shoal_err *err)
{
    unsigned char reply[RELAY_REPLY_BYTES];
    size_t got = 0;
    double deadline = mono_s() + timeout_ms / 1e3;
    while (got < sizeof reply) {
        double left = deadline - mono_s();
        if (left <= 0)
            return err_set(err, 504, "peer_timeout", NULL, "relay %s paired nothing with us within %d ms", relay,
                           timeout_ms);
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };
        int n = poll(p, cancel_fd >= 0 ? 2 : 1, left * 1e3 > INT_MAX ? INT_MAX : (int)(left * 1e3) + 1);
        if (n < 0 && errno != EINTR)
            return err_set(err, 502, "peer_io", NULL, "relay %s: poll: %s", relay, strerror(errno));
        if (n <= 0)
            continue;
        if (cancel_fd >= 0 && (p[1].revents & POLLIN))
            return err_set(err, 503, "peer_io", NULL, "stopped waiting for relay %s", relay);
        ssize_t r = read(fd, reply + got, sizeof reply - got);
        if (r == 0)
            return err_set(err, 502, "peer_io", NULL, "relay %s closed the connection before pairing it", relay);
        if (r < 0 && errno != EINTR && errno != EAGAIN)
            return err_set(err, 502, "peer_io", NULL, "relay %s: %s", relay, strerror(errno));
        got += r > 0 ? (size_t)r : 0;
    }
    if (reply[0] == 'P')
        return 0;
    reply[sizeof reply - 1] = '\0';
    return err_set(err, 502, "relay_refused", NULL, "relay %s refused the connection: %s", relay,
                   (const char *)reply + 1);
}
