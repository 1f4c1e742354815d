/* fuzz_relay.c - what shoal-relay reads from anyone who connects, and the
 * server's tickets (common/relay_proto.h, common/relay_ticket.h), on
 * hostile bytes.  The first input byte picks what the rest is:
 *
 *   0  a request (relay_request_header, relay_request_decode; the rest
 *      zero-padded to RELAY_REQUEST_BYTES): one that parses must encode
 *      back to the same bytes, with the ticket's side the request's;
 *   1  a ticket (relay_ticket_decode): one that parses must encode back to
 *      the same bytes, and relay_ticket_verify under the fixed secret may
 *      take it only when its MAC is the one relay_ticket_sign gives its
 *      fields and it has not expired;
 *   2  a ticket's hex form (relay_ticket_from_hex, as an assignment carries
 *      it): one that parses is the same ticket in lowercase hex;
 *   3  sign, alter, verify: a ticket's fields from the input, signed with
 *      the fixed secret, one byte of its encoding xor-ed as the input says:
 *      verify must take it exactly when nothing was changed. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/relay_proto.h"
#include "../../common/relay_ticket.h"

#define FUZZ_SECRET "shoal_relay_fuzz_0123456789abcdef0123456789abcdef"
#define FUZZ_NOW 1800000000   /* unix s: the relay's clock here */

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_relay: broken promise: %s\n", what);
        abort();
    }
}

static const struct relay_secret *secret(void)
{
    static struct relay_secret s;
    static int ready;
    struct shoal_err err;
    if (!ready) {
        expect(relay_secret_set(FUZZ_SECRET, &s, &err) == 0, "the fixed secret is one");
        ready = 1;
    }
    return &s;
}

static void request(const uint8_t *d, size_t n)
{
    unsigned char in[RELAY_REQUEST_BYTES] = { 0 }, out[RELAY_REQUEST_BYTES];
    struct relay_request r;
    char why[160];
    memcpy(in, d, n < sizeof in ? n : sizeof in);
    int header = relay_request_header(in, why, sizeof why);
    if (relay_request_decode(in, &r, why, sizeof why) != 0)
        return;
    expect(header == 0, "a request that parses has a request's header");
    expect(r.side == r.ticket.side, "the request's side is its ticket's");
    relay_request_encode(&r, out);
    expect(memcmp(in, out, sizeof in) == 0, "a request that parses encodes back to the same bytes");
}

static void ticket(const uint8_t *d, size_t n)
{
    unsigned char in[RELAY_TICKET_BYTES] = { 0 }, out[RELAY_TICKET_BYTES];
    struct relay_ticket t, again;
    char why[160];
    memcpy(in, d, n < sizeof in ? n : sizeof in);
    if (relay_ticket_decode(in, &t, why, sizeof why) != 0)
        return;
    relay_ticket_encode(&t, out);
    expect(memcmp(in, out, sizeof in) == 0, "a ticket that parses encodes back to the same bytes");
    again = t;
    relay_ticket_sign(secret(), &again);
    int right = memcmp(again.mac, t.mac, RELAY_TICKET_MAC_BYTES) == 0;
    int taken = relay_ticket_verify(secret(), &t, FUZZ_NOW, why, sizeof why) == 0;
    expect(!taken || (right && t.expires > FUZZ_NOW), "verify takes only a ticket signed with the secret, unexpired");
    expect(!right || t.expires <= FUZZ_NOW || taken, "verify takes a ticket signed with the secret, unexpired");
}

static void hex(const uint8_t *d, size_t n)
{
    char in[RELAY_TICKET_HEX + 8], out[RELAY_TICKET_HEX], why[160];
    struct relay_ticket t;
    size_t len = n < sizeof in - 1 ? n : sizeof in - 1;
    memcpy(in, d, len);
    in[len] = '\0';
    if (relay_ticket_from_hex(in, &t, why, sizeof why) != 0)
        return;
    relay_ticket_hex(&t, out);
    expect(strlen(in) == RELAY_TICKET_HEX - 1, "a ticket's hex form has its length");
    for (size_t i = 0; in[i]; i++)
        expect(tolower((unsigned char)in[i]) == out[i], "a ticket's hex form is the ticket");
}

static void altered(const uint8_t *d, size_t n)
{
    unsigned char enc[RELAY_TICKET_BYTES], fields[RELAY_TICKET_FIELDS] = { 0 };
    struct relay_ticket t, back;
    char why[160];
    if (n < 2)
        return;
    size_t at = d[0] % RELAY_TICKET_BYTES;
    unsigned char flip = d[1];
    d += 2, n -= 2;
    memcpy(fields, d, n < sizeof fields ? n : sizeof fields);
    memset(&t, 0, sizeof t);
    /* fields the decoder takes: a link's two ends, or a probe's node */
    t.side = fields[0] % 3;
    t.channel = fields[1] % 4;
    t.epoch = (uint32_t)(fields[4] | fields[5] << 8);
    t.job_id = 1 + (fields[8] | fields[9] << 8);
    t.expires = FUZZ_NOW + 1 + (fields[16] | fields[17] << 8);
    t.dialer.stage = fields[24] % 64, t.dialer.replica = fields[25] % 64, t.dialer.node = 1 + fields[26];
    if (t.side == RELAY_SIDE_PROBE) {
        t.job_id = 0, t.epoch = 0, t.channel = 0, t.dialer.stage = 0, t.dialer.replica = 0;
    } else {
        t.listener.stage = fields[32] % 64, t.listener.replica = fields[33] % 64, t.listener.node = 1 + fields[34];
    }
    relay_ticket_sign(secret(), &t);
    relay_ticket_encode(&t, enc);
    if (relay_ticket_decode(enc, &back, why, sizeof why) != 0)
        return;   /* fields the decoder refuses: nothing to verify */
    expect(relay_ticket_verify(secret(), &back, FUZZ_NOW, why, sizeof why) == 0, "a signed ticket is taken");
    enc[at] ^= flip;
    if (relay_ticket_decode(enc, &back, why, sizeof why) != 0)
        return;
    int taken = relay_ticket_verify(secret(), &back, FUZZ_NOW, why, sizeof why) == 0;
    expect(taken == (flip == 0), "an altered ticket is refused, an unaltered one taken");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0: request(data + 1, size - 1); break;
    case 1: ticket(data + 1, size - 1); break;
    case 2: hex(data + 1, size - 1); break;
    default: altered(data + 1, size - 1); break;
    }
    return 0;
}
