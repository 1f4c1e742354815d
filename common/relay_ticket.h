/* relay_ticket.h - the server's admission to shoal-relay (issue 45): a
 * ticket says "the server planned this connection; let this end in until
 * then".  shoal-server and its relay share a secret (a file on each side:
 * the server's <data-dir>/relay.secret, the relay's --secret-file); the
 * server signs, per relayed link of an assignment, one ticket for each of
 * the link's two ends, and, per probe answer, one for a node's probe of
 * the relay.  The relay pairs only a dialer's and a listener's tickets of
 * the same link, and counts its per-job limits against the job the ticket
 * names (which nobody without the secret can choose).
 *
 * A ticket is RELAY_TICKET_BYTES, little-endian:
 *     side(1) | channel(1) | zero(2) | epoch(4) | job id(8) | expires(8)
 *     | dialer: stage(4) replica(4) node(8) | listener: stage(4) replica(4)
 *     node(8) | mac(32)
 * mac = HMAC-SHA256(secret, "shoal-relay-ticket-v1" | the 56 bytes before
 * it).  side is the end it admits (enum relay_side); channel the
 * connection's (enum wire_channel); dialer and listener the link's two
 * tasklets (the roles wire_role names, as numbers); expires unix seconds.
 * A probe's ticket (RELAY_SIDE_PROBE) names job 0, epoch 0, channel 0,
 * the probing node as the dialer (stage and replica 0) and no listener.
 * A ticket is not secret (it admits one end of one planned link, which the
 * link key's token must still match); the secret is. */
#ifndef SHOAL_RELAY_TICKET_H
#define SHOAL_RELAY_TICKET_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "token.h"

#define RELAY_TICKET_FIELDS 56          /* bytes under the MAC */
#define RELAY_TICKET_MAC_BYTES 32
#define RELAY_TICKET_BYTES (RELAY_TICKET_FIELDS + RELAY_TICKET_MAC_BYTES)
#define RELAY_TICKET_HEX (2 * RELAY_TICKET_BYTES + 1)
#define RELAY_SECRET_MIN 32             /* characters of a shared secret, at least */

enum relay_side { RELAY_SIDE_DIALER = 0, RELAY_SIDE_LISTENER = 1, RELAY_SIDE_PROBE = 2 };

/* One end of a link: the tasklet (stage, replica) on node. */
struct relay_end {
    int32_t stage, replica;
    int64_t node;
};

struct relay_ticket {
    int side;                           /* enum relay_side: the end it admits */
    unsigned channel;                   /* enum wire_channel */
    uint32_t epoch;                     /* the job's plan epoch */
    int64_t job_id;                     /* 0 for a probe */
    int64_t expires;                    /* unix seconds; refused from then on */
    struct relay_end dialer, listener;  /* a probe: dialer.node the prober, listener zero */
    unsigned char mac[RELAY_TICKET_MAC_BYTES];
};

/* The secret the server and its relay share: 32-127 printable characters
 * without spaces (the server writes "shoal_relay_" and 64 hex digits). */
struct relay_secret {
    char key[TOKEN_MAX];
    size_t len;
};

/* Reads the secret from the first line of the file at `path`.  Returns 0,
 * or -1 with err set (400 "bad_secret_file", the message naming the file
 * and what is wrong with it). */
int relay_secret_load(const char *path, struct relay_secret *out, struct shoal_err *err);

/* Takes `text` as the secret; -1 with err set when it is not one. */
int relay_secret_set(const char *text, struct relay_secret *out, struct shoal_err *err);

/* "dialer", "listener", "probe" (anything else: "unknown"), for messages. */
const char *relay_side_name(int side);

/* Fills t->mac for t's other fields under `s`. */
void relay_ticket_sign(const struct relay_secret *s, struct relay_ticket *t);

void relay_ticket_encode(const struct relay_ticket *t, unsigned char out[RELAY_TICKET_BYTES]);

/* Parses a ticket, checking its shape (side, channel, zero bytes, a link's
 * ends or a probe's node) but not its MAC.  Returns 0, or -1 with the
 * reason in why. */
int relay_ticket_decode(const unsigned char in[RELAY_TICKET_BYTES], struct relay_ticket *t, char *why,
                        size_t why_len);

/* The ticket as RELAY_TICKET_HEX - 1 lowercase hex digits and a NUL. */
void relay_ticket_hex(const struct relay_ticket *t, char out[RELAY_TICKET_HEX]);

/* Parses the hex form; -1 with the reason in why when it is not a ticket. */
int relay_ticket_from_hex(const char *hex, struct relay_ticket *t, char *why, size_t why_len);

/* 0 when t's MAC is right under `s` and it has not expired at now_s (unix
 * seconds); else -1 with the reason in why. */
int relay_ticket_verify(const struct relay_secret *s, const struct relay_ticket *t, int64_t now_s, char *why,
                        size_t why_len);

/* 1 when a and b admit ends of the same connection (job, epoch, channel,
 * dialer and listener equal; sides not compared), else 0. */
int relay_ticket_same_link(const struct relay_ticket *a, const struct relay_ticket *b);

#endif
