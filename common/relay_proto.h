/* relay_proto.h - what an agent and shoal-relay say before the relay joins
 * two connections (issue 37: two agents that cannot connect to each other
 * either way both dial out to the relay; issue 45: only the connections
 * the server planned, admitted by its tickets, relay_ticket.h).
 *
 * Each end connects and sends one request of RELAY_REQUEST_BYTES:
 *     magic "SHOALRLY"(8) | version(1) | side(1) | zero(6)
 *     | ticket(RELAY_TICKET_BYTES) | token(32)
 * The relay reads the first 16 bytes first, so an end of another version
 * is told at once.  side RELAY_SIDE_DIALER for the end that will speak the
 * dialer's hello, RELAY_SIDE_LISTENER for the one that answers it,
 * RELAY_SIDE_PROBE for an agent measuring its link to the relay (token
 * unused): it must be the ticket's side.  The ticket is the server's for
 * this end (an assignment's for a link, the probe answer's for a probe):
 * the relay refuses one whose MAC is not its secret's, one that expired,
 * and one whose side is not the request's.  A probe is answered at once,
 * then every byte it sends comes back, up to RELAY_PROBE_MAX_BYTES within
 * RELAY_PROBE_MAX_S.  The token is the link's (wire_relay_token): both
 * ends derive it from their link key, a second factor the server's
 * tickets do not replace.  The relay pairs a dialer and a listener whose
 * tickets name the same link (job, epoch, channel, the two tasklets) and
 * whose tokens are equal, then answers each with RELAY_REPLY_BYTES:
 *     status(1: 'P' paired, 'E' refused) | text (NUL-padded)
 * and from then on forwards every byte each way, reading none of them (the
 * job connection's handshake and sealing run end to end through it).  A
 * request the relay refuses (malformed, a bad ticket, over a limit, no
 * partner within its wait) gets an 'E' reply with the reason, then the
 * close; so does a pair idle past the relay's --idle-timeout (closed
 * without a reply: the bytes are the ends' by then). */
#ifndef SHOAL_RELAY_PROTO_H
#define SHOAL_RELAY_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "relay_ticket.h"

#define RELAY_VERSION 2            /* 1: no ticket (any two ends with one token were paired) */
#define RELAY_TOKEN_BYTES 32
#define RELAY_HEADER_BYTES 16
#define RELAY_REQUEST_BYTES (RELAY_HEADER_BYTES + RELAY_TICKET_BYTES + RELAY_TOKEN_BYTES)
#define RELAY_REPLY_BYTES 128         /* 64 in version 1 */

#define RELAY_PROBE_MAX_BYTES (64u << 20)   /* echoed per probe connection */
#define RELAY_PROBE_MAX_S 30

struct relay_request {
    int side;                               /* enum relay_side, the ticket's */
    struct relay_ticket ticket;             /* as sent: its MAC is the relay's to check */
    unsigned char token[RELAY_TOKEN_BYTES];
};

void relay_request_encode(const struct relay_request *r, unsigned char out[RELAY_REQUEST_BYTES]);

/* Checks a request's first RELAY_HEADER_BYTES (magic, version, side, zero
 * bytes); -1 with the reason in why when they are not a request's of this
 * version. */
int relay_request_header(const unsigned char in[RELAY_HEADER_BYTES], char *why, size_t why_len);

/* Parses a whole request (its header, its ticket's shape, the ticket's side
 * being the request's), not the ticket's MAC or expiry; -1 with the reason
 * in why when it is not one. */
int relay_request_decode(const unsigned char in[RELAY_REQUEST_BYTES], struct relay_request *r, char *why,
                         size_t why_len);

/* A reply: 'P' (paired) or 'E' with `text`. */
void relay_reply_encode(char status, const char *text, unsigned char out[RELAY_REPLY_BYTES]);

/* Reads the relay's reply on fd within timeout_ms (cancel_fd >= 0: gives up
 * when it becomes readable).  Returns 0 when paired, else -1 with err set
 * (code "peer_io", or "relay_refused" with the relay's reason). */
int relay_wait_paired(int fd, const char *relay, int timeout_ms, int cancel_fd, struct shoal_err *err);

#endif
