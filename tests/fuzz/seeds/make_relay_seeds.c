/* make_relay_seeds.c - writes tests/fuzz/corpus/fuzz_relay/: a dialer's
 * and a listener's request for one relayed link, a probe's, their tickets
 * alone and in hex, signed with fuzz_relay.c's fixed secret.
 *
 *   build (from the repository root):
 *     cc -std=c11 -D_GNU_SOURCE -pthread -o /tmp/make_relay_seeds tests/fuzz/seeds/make_relay_seeds.c \
 *         common/*.c -ljansson -lcrypto -lm
 *   run:   /tmp/make_relay_seeds tests/fuzz/corpus/fuzz_relay */
#include <stdio.h>
#include <string.h>

#include "../../../common/relay_proto.h"
#include "../../../common/relay_ticket.h"

static void seed(const char *dir, const char *name, unsigned char kind, const void *bytes, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    fputc(kind, f);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    struct relay_secret s;
    struct shoal_err err;
    if (argc != 2 || relay_secret_set("shoal_relay_fuzz_0123456789abcdef0123456789abcdef", &s, &err) != 0) {
        fprintf(stderr, "usage: make_relay_seeds DIR\n");
        return 2;
    }
    struct relay_ticket link = { .side = RELAY_SIDE_DIALER, .channel = 1, .epoch = 3, .job_id = 7,
                                 .expires = 1800003600, .dialer = { 0, 1, 11 }, .listener = { 1, 1, 12 } };
    struct relay_ticket probe = { .side = RELAY_SIDE_PROBE, .expires = 1800000600, .dialer = { 0, 0, 11 } };
    struct relay_ticket *t[] = { &link, &probe };
    const char *names[] = { "dialer", "probe" };
    for (int i = 0; i < 2; i++) {
        unsigned char enc[RELAY_TICKET_BYTES], req[RELAY_REQUEST_BYTES];
        char hex[RELAY_TICKET_HEX], name[64];
        relay_ticket_sign(&s, t[i]);
        relay_ticket_encode(t[i], enc);
        struct relay_request r = { .side = t[i]->side, .ticket = *t[i] };
        memset(r.token, 0x5a, sizeof r.token);
        relay_request_encode(&r, req);
        relay_ticket_hex(t[i], hex);
        snprintf(name, sizeof name, "request_%s", names[i]);
        seed(argv[1], name, 0, req, sizeof req);
        snprintf(name, sizeof name, "ticket_%s", names[i]);
        seed(argv[1], name, 1, enc, sizeof enc);
        snprintf(name, sizeof name, "hex_%s", names[i]);
        seed(argv[1], name, 2, hex, strlen(hex));
        snprintf(name, sizeof name, "altered_%s", names[i]);
        unsigned char alt[2 + RELAY_TICKET_FIELDS] = { 40, 1 };
        memcpy(alt + 2, enc, RELAY_TICKET_FIELDS);
        seed(argv[1], name, 3, alt, sizeof alt);
    }
    link.side = RELAY_SIDE_LISTENER;
    relay_ticket_sign(&s, &link);
    struct relay_request r = { .side = link.side, .ticket = link };
    unsigned char req[RELAY_REQUEST_BYTES];
    memset(r.token, 0x5a, sizeof r.token);
    relay_request_encode(&r, req);
    seed(argv[1], "request_listener", 0, req, sizeof req);
    return 0;
}
