/* relay_proto.h - what an agent and shoal-relay say before the relay joins
 * two connections (issue 37: two agents that cannot connect to each other
 * either way both dial out to the relay).
 *
 * Each end connects and sends one request of RELAY_REQUEST_BYTES:
 *     magic "SHOALRLY"(8) | version(1) | side(1) | zero(6) | job id(8, LE)
 *     | token(32)
 * side RELAY_SIDE_DIALER for the end that will speak the dialer's hello,
 * RELAY_SIDE_LISTENER for the one that answers it, RELAY_SIDE_PROBE for an
 * agent measuring its link to the relay (job 0, token unused): answered at
 * once, then every byte it sends comes back, up to RELAY_PROBE_MAX_BYTES
 * within RELAY_PROBE_MAX_S.  The token is the link's
 * (wire_relay_token): both ends derive it from their link key, and the relay
 * learns nothing else.  The relay pairs a dialer and a listener with the
 * same token, then answers each with RELAY_REPLY_BYTES:
 *     status(1: 'P' paired, 'E' refused) | text (NUL-padded)
 * and from then on forwards every byte each way, reading none of them (the
 * job connection's handshake and sealing run end to end through it).  A
 * request the relay refuses (malformed, over a limit, no partner within
 * its wait) gets an 'E' reply with the reason, then the close. */
#ifndef SHOAL_RELAY_PROTO_H
#define SHOAL_RELAY_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RELAY_VERSION 1
#define RELAY_TOKEN_BYTES 32
#define RELAY_REQUEST_BYTES 56
#define RELAY_REPLY_BYTES 64

enum relay_side { RELAY_SIDE_DIALER = 0, RELAY_SIDE_LISTENER = 1, RELAY_SIDE_PROBE = 2 };
#define RELAY_PROBE_MAX_BYTES (64u << 20)   /* echoed per probe connection */
#define RELAY_PROBE_MAX_S 30

struct relay_request {
    int side;                               /* enum relay_side */
    int64_t job_id;
    unsigned char token[RELAY_TOKEN_BYTES];
};

void relay_request_encode(const struct relay_request *r, unsigned char out[RELAY_REQUEST_BYTES]);

/* Parses a request; -1 with the reason in why when it is not one. */
int relay_request_decode(const unsigned char in[RELAY_REQUEST_BYTES], struct relay_request *r, char *why,
                         size_t why_len);

/* A reply: 'P' (paired) or 'E' with `text`. */
void relay_reply_encode(char status, const char *text, unsigned char out[RELAY_REPLY_BYTES]);

/* Reads the relay's reply on fd within timeout_ms (cancel_fd >= 0: gives up
 * when it becomes readable).  Returns 0 when paired, else -1 with err set
 * (code "peer_io", or "relay_refused" with the relay's reason). */
int relay_wait_paired(int fd, const char *relay, int timeout_ms, int cancel_fd, struct shoal_err *err);

#endif
