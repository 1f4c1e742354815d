/* bench_relay.c - one end of a job connection, direct or through
 * shoal-relay, for tests/bench/bench_relay.sh (which runs the two ends in
 * two hosts of the testbed, and the relay in a third):
 *
 *   bench_relay listen HOST:PORT [RELAY] BYTES   the listener's end: expects
 *       the dialer's role, takes its connection (asked at RELAY when given)
 *       and receives BYTES of frames, then answers one frame
 *   bench_relay dial ADDR|RELAY relay|direct BYTES   the dialer's end:
 *       dials ADDR directly or through RELAY, sends BYTES in 4 MiB F32
 *       frames, waits for the answer
 *
 * Both ends seal (a relayed connection always is; the direct one is asked
 * to, so the two differ only in the path).  Through a relay, each end
 * signs its own ticket as a server would, under the secret in the file
 * SHOAL_RELAY_SECRET_FILE names (the relay's --secret-file).  The dialer prints one JSON
 * line {"bench":"relay-end","path":...,"bytes":...,"seconds":...}: the
 * time from its first frame to the listener's answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../agent/net/peer.h"
#include "../../common/clock.h"
#include "../../common/log.h"
#include "../../common/relay_ticket.h"
#include "../peer_keys.h"

#define FRAME_BYTES (4u << 20)
#define TIMEOUT_MS 120000
#define SECRET "bench_relay"
#define ROLE_D "stage=0 replica=0 node=1"
#define ROLE_L "stage=1 replica=0 node=2"

static struct peer_auth auth_make(const char *role)
{
    struct peer_auth a = { .job_id = 1, .epoch = 1, .encrypt = 1 };
    snprintf(a.role, sizeof a.role, "%s", role);
    peer_keys_link(&a, SECRET, strcmp(role, ROLE_L) == 0 ? ROLE_D : ROLE_L);
    return a;
}

/* The server's ticket for `side` of the link ROLE_D -> ROLE_L (job 1,
 * epoch 1, the stage channel), valid an hour, under the secret of the
 * file SHOAL_RELAY_SECRET_FILE names. */
static int ticket_make(int side, struct relay_ticket *t, struct shoal_err *err)
{
    const char *path = getenv("SHOAL_RELAY_SECRET_FILE");
    struct relay_secret s;
    if (!path)
        return err_set(err, 2, "bad_config", NULL, "set SHOAL_RELAY_SECRET_FILE to the relay's --secret-file");
    if (relay_secret_load(path, &s, err) != 0)
        return -1;
    *t = (struct relay_ticket){ .side = side, .channel = WIRE_CHANNEL_STAGE, .epoch = 1, .job_id = 1,
                                .expires = (int64_t)time(NULL) + 3600, .dialer = { 0, 0, 1 },
                                .listener = { 1, 0, 2 } };
    relay_ticket_sign(&s, t);
    return 0;
}

static struct wire_frame frame(uint64_t len)
{
    return (struct wire_frame){ .kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .ndim = 1,
                                .shape = { (uint32_t)(len / 4) }, .payload_len = len };
}

static int listen_end(const char *addr, const char *relay, uint64_t bytes, struct shoal_err *e)
{
    struct shoal_err err = { 0 };
    struct peer_listener *l;
    struct peer_conn c;
    unsigned port;
    struct peer_auth a = auth_make(ROLE_L);
    struct relay_ticket t;
    float *buf = malloc(FRAME_BYTES);
    int rc = 1;
    if (relay && ticket_make(RELAY_SIDE_LISTENER, &t, e) != 0) {
        free(buf);
        return 1;
    }
    if (!buf || peer_listener_start(addr, &l, &port, &err) != 0) {
        *e = err;
        free(buf);
        return 1;
    }
    peer_listener_expect(l, &a);
    if (relay && peer_listener_relay(l, relay, &t, ROLE_D, WIRE_CHANNEL_STAGE, TIMEOUT_MS, TIMEOUT_MS, &err) != 0)
        goto out;
    if (peer_listener_take_stop(l, ROLE_D, WIRE_CHANNEL_STAGE, TIMEOUT_MS, NULL, &c, &err) != 0)
        goto out;
    for (uint64_t got = 0; got < bytes;) {
        struct wire_frame f;
        if (peer_recv(&c, &f, buf, FRAME_BYTES, TIMEOUT_MS, &err) != 0)
            goto close;
        got += f.payload_len;
    }
    struct wire_frame done = frame(4);
    if (peer_send(&c, &done, buf, TIMEOUT_MS, &err) != 0)
        goto close;
    rc = 0;
close:
    peer_close(&c);
out:
    *e = err;
    peer_listener_stop(l);
    free(buf);
    return rc;
}

static int dial_end(const char *addr, int relayed, uint64_t bytes, struct shoal_err *err)
{
    struct peer_conn c;
    struct peer_auth a = auth_make(ROLE_D);
    struct relay_ticket t;
    float *buf = calloc(1, FRAME_BYTES);
    int rc = 1;
    if (!buf || (relayed && ticket_make(RELAY_SIDE_DIALER, &t, err) != 0)) {
        free(buf);
        return 1;
    }
    int64_t until = mono_ms() + TIMEOUT_MS;   /* the listener's end may not be up yet */
    while ((relayed ? peer_dial_relayed(addr, &t, &a, ROLE_L, WIRE_CHANNEL_STAGE, TIMEOUT_MS, &c, err)
                    : peer_dial_channel(addr, &a, ROLE_L, WIRE_CHANNEL_STAGE, 5000, &c, err)) != 0) {
        if (mono_ms() > until)
            goto out;
        struct timespec ts = { 0, 100000000 };
        nanosleep(&ts, NULL);
    }
    double t0 = mono_s();
    for (uint64_t sent = 0; sent < bytes;) {
        uint64_t n = bytes - sent < FRAME_BYTES ? bytes - sent : FRAME_BYTES;
        struct wire_frame f = frame(n);
        if (peer_send(&c, &f, buf, TIMEOUT_MS, err) != 0)
            goto close;
        sent += n;
    }
    struct wire_frame f;
    if (peer_recv(&c, &f, buf, FRAME_BYTES, TIMEOUT_MS, err) != 0)
        goto close;
    printf("{\"bench\":\"relay-end\",\"path\":\"%s\",\"bytes\":%llu,\"seconds\":%.4f,\"sealed\":%s}\n",
           relayed ? "relay" : "direct", (unsigned long long)bytes, mono_s() - t0, c.seal ? "true" : "false");
    rc = 0;
close:
    peer_close(&c);
out:
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    struct shoal_err err = { .message = "out of memory" };
    int rc;
    log_threshold = LOG_LEVEL_ERROR;
    if (argc == 5 && strcmp(argv[1], "listen") == 0)
        rc = listen_end(argv[2], strcmp(argv[3], "-") == 0 ? NULL : argv[3], strtoull(argv[4], NULL, 10), &err);
    else if (argc == 5 && strcmp(argv[1], "dial") == 0)
        rc = dial_end(argv[2], strcmp(argv[3], "relay") == 0, strtoull(argv[4], NULL, 10), &err);
    else
        rc = -1;
    if (rc > 0)
        fprintf(stderr, "bench_relay: %s\n", err.message);
    if (rc >= 0)
        return rc;
    fprintf(stderr, "usage: bench_relay listen HOST:PORT RELAY|- BYTES\n"
                    "       bench_relay dial ADDR|RELAY relay|direct BYTES\n");
    return 2;
}
