/* probe.h - measuring the link to one peer over its peer port: latency from
 * small echoes, bandwidth from timed bulk transfers (see peer.h for the
 * probe session the listener answers). */
#ifndef SHOAL_AGENT_PROBE_H
#define SHOAL_AGENT_PROBE_H

#include "../../common/err.h"
#include "../../common/relay_ticket.h"

#define PROBE_PINGS 9                     /* echoes; the median is kept */
#define PROBE_BURSTS 3                    /* timed transfers; the median is kept */
#define PROBE_FRAME_BYTES (1u << 20)      /* payload per PROBE frame */
#define PROBE_BURST_MIN (1u << 20)        /* bytes */
#define PROBE_BURST_MAX (16u << 20)       /* bytes; with the warm-up, under PEER_PROBE_MAX_BYTES */
#define PROBE_BURST_TARGET_S 0.25         /* a burst is sized to take about this long */
#define PROBE_WHY_MAX 200                 /* bytes of why a link could not be connected, as PUT /v1/links takes it */

struct probe_result {
    double latency_ms;       /* one way: the median round trip / 2 */
    double bandwidth_gbps;   /* Gbit/s, this host to the peer */
    double seconds;          /* the probe's own duration */
    unsigned long long bytes;/* sent, payload */
    int connected;           /* the peer's listener answered the dial (greeted): set also when the probe fails later */
};

/* Probes the peer at `addr` ("host:port"): a warm-up burst, then
 * PROBE_BURSTS bursts sized from it, each timed from its first byte to the
 * peer's PONG, minus one round trip.  Every socket wait is bounded by
 * timeout_ms.  Returns 0, or -1 with err set (the peer's address in it);
 * out->connected says whether it got as far as the peer's greeting (0: the
 * link could not be connected at all: nothing listens, a firewall, NAT). */
int probe_link(const char *addr, int timeout_ms, struct probe_result *out, struct shoal_err *err);

/* Measures this host's link to shoal-relay `relay` ("host:port") the same
 * way over its echo (common/relay_proto.h, RELAY_SIDE_PROBE), admitted by
 * the server's probe `ticket` (GET /v1/agent/probes "relay_ticket"):
 * latency from small echoes, bandwidth from bursts that go there and back
 * at once (what a relayed connection can carry both ways).  Same bounds
 * and result. */
int probe_relay(const char *relay, const struct relay_ticket *ticket, int timeout_ms, struct probe_result *out,
                struct shoal_err *err);

#endif
