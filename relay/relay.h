/* relay.h - shoal-relay: joins two agents that cannot connect to each
 * other either way (behind NAT, closed firewalls).  Both dial out to it;
 * it pairs their connections by the link's token and forwards their bytes
 * without reading them (protocol: common/relay_proto.h).  The job
 * connection's handshake and sealing run end to end through it, so a
 * relay learns nothing of a link's key and cannot change a byte unnoticed.
 *
 * One thread per connection: it reads the request, waits for its partner,
 * then forwards what its own socket receives to the partner's.  The same
 * port answers "GET /metrics" (Prometheus text) and "GET /healthz". */
#ifndef SHOAL_RELAY_H
#define SHOAL_RELAY_H

#include <stdint.h>

#include "../common/err.h"

struct relay_config {
    char listen[300];            /* "host:port" to bind (port 0: any) */
    long max_connections;        /* held at once (waiting, paired, being read); more are closed */
    long max_links_per_job;      /* pairs of one job, waiting or joined */
    long pair_wait_s;            /* a connection waits this long for its partner */
    long job_rate_mbit;          /* Mbit/s one job's links may carry together, both ways; 0: no limit */
};

struct relay;

/* Binds, listens and starts the accept thread; *bound_port gets the port. */
int relay_start(const struct relay_config *cfg, struct relay **out, unsigned *bound_port, struct shoal_err *err);

/* Stops accepting, closes every connection, joins every thread. */
void relay_stop(struct relay *r);

/* Counters (what /metrics shows). */
struct relay_counts {
    uint64_t waiting, joined;    /* connections waiting for a partner; pairs forwarding now */
    uint64_t pairs_total;        /* pairs joined since start */
    uint64_t refused_total;      /* connections refused (malformed, over a limit, no partner in time) */
    uint64_t bytes_total;        /* bytes forwarded, both ways */
};
void relay_counts(struct relay *r, struct relay_counts *out);

#endif
