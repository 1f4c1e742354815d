/* relay.h - shoal-relay: joins two agents that cannot connect to each
 * other either way (behind NAT, closed firewalls).  Both dial out to it;
 * it pairs the two ends of a link the server planned (each presents the
 * server's ticket for its end, signed under the secret the server and the
 * relay share, and the link's token) and forwards their bytes without
 * reading them (protocol: common/relay_proto.h, tickets:
 * common/relay_ticket.h).  The job connection's handshake and sealing run
 * end to end through it, so a relay learns nothing of a link's key and
 * cannot change a byte unnoticed.
 *
 * Its limits: connections held in all and per client address, those
 * waiting for a partner per address, links per job (the ticket's job), a
 * job's rate; a waiting end whose client has gone is dropped at once, an
 * idle pair is closed, and per-job metric series are bounded
 * (relay_books.h).
 *
 * One thread per connection: it reads the request, waits for its partner,
 * then forwards what its own socket receives to the partner's.  The same
 * port answers "GET /metrics" (Prometheus text) and "GET /healthz". */
#ifndef SHOAL_RELAY_H
#define SHOAL_RELAY_H

#include <stdint.h>

#include "../common/err.h"
#include "../common/relay_ticket.h"

struct relay_config {
    char listen[300];            /* "host:port" to bind (port 0: any) */
    struct relay_secret secret;  /* the server's (its relay.secret): tickets verify under it */
    long max_connections;        /* held at once (waiting, paired, being read); more are closed */
    long max_connections_per_address; /* held at once from one address (IPv6: one /64) */
    long max_waiting_per_address;     /* of those, waiting for their partner */
    long max_links_per_job;      /* pairs of one job, waiting or joined */
    long pair_wait_s;            /* a connection waits this long for its partner */
    long idle_timeout_s;         /* a pair with no byte either way for this long is closed */
    long job_rate_mbit;          /* Mbit/s one job's links may carry together, both ways; 0: no limit */
    long max_job_series;         /* jobs with a series in /metrics at once */
    long job_series_ttl_s;       /* s a job's series stays after its last link closed */
};

struct relay;

/* Binds, listens and starts the accept thread; *bound_port gets the port.
 * Returns 0, or -1 with err set (400 "bad_config" for a setting, such as a
 * secret shorter than RELAY_SECRET_MIN; 500 when it cannot listen). */
int relay_start(const struct relay_config *cfg, struct relay **out, unsigned *bound_port, struct shoal_err *err);

/* Stops accepting, closes every connection, joins every thread. */
void relay_stop(struct relay *r);

/* Counters (what /metrics shows). */
struct relay_counts {
    uint64_t waiting, joined;    /* connections waiting for a partner; pairs forwarding now */
    uint64_t pairs_total;        /* pairs joined since start */
    uint64_t refused_total;      /* connections refused (malformed, a bad ticket, over a limit, no partner in time) */
    uint64_t bad_tickets_total;  /* of them: no valid ticket (forged, another secret's, expired, wrong side) */
    uint64_t gone_total;         /* waiting connections dropped because their client closed */
    uint64_t idle_closed_total;  /* pairs closed after --idle-timeout without a byte */
    uint64_t bytes_total;        /* bytes forwarded, both ways */
    uint64_t held;               /* connections held now (reading, waiting, paired) */
};
void relay_counts(struct relay *r, struct relay_counts *out);

#endif
