/* peer_admit.h - the hosts a peer listener expects (peer_listener.c's
 * admission): a client's address without its port as a key, and the keys
 * of "host:port" addresses and of a URL's host, resolved.  Internal to
 * agent/net. */
#ifndef SHOAL_AGENT_PEER_ADMIT_H
#define SHOAL_AGENT_PEER_ADMIT_H

#include <stddef.h>
#include <sys/socket.h>

#include "../../common/err.h"
#include "../../common/hostport.h"

#define PEER_HOST_KEY HOSTPORT_KEY_BYTES   /* a client's address without its port (hostport_client_key) */
#define PEER_HOSTS_MAX 32   /* keys a set holds: a tasklet's links, each name's addresses */

/* A set of host keys. */
struct peer_hosts {
    unsigned char key[PEER_HOSTS_MAX][PEER_HOST_KEY];
    int n;
};

/* 1 if the set holds `key`. */
int peer_admit_has(const struct peer_hosts *h, const unsigned char key[PEER_HOST_KEY]);

/* Adds every address of `host` (a numeric address, or a name resolved
 * here, which may wait for DNS) to the set; a full set keeps what it has.
 * Returns 0, or -1 with err set (400 invalid_address) naming the host when
 * it does not resolve. */
int peer_admit_add(struct peer_hosts *h, const char *host, struct shoal_err *err);

/* Adds the host of each "host:port" or "[v6]:port" in addrs[0..n) (empty
 * strings are passed over).  Returns 0, or -1 with err set naming the
 * first that is malformed or does not resolve (the others are added). */
int peer_admit_add_peers(struct peer_hosts *h, const char *const *addrs, int n, struct shoal_err *err);

/* Adds the host of URL `url` ("http://host:port/...", "https://[v6]/").
 * Returns 0, or -1 with err set when it names none or it does not
 * resolve. */
int peer_admit_add_url(struct peer_hosts *h, const char *url, struct shoal_err *err);

/* Says "busy" to a connection refused for want of a handshake slot, without
 * blocking the accept thread: the listener's greeting and an ERROR frame
 * with `why` (at most 128 bytes of it) in one send, then closes fd.  A
 * dialer is told why (and retries); the server's probe
 * (server/jobs/peer_probe.c) hears a live node that is busy, not a dead
 * one. */
void peer_admit_busy(int fd, const char *why);

#endif
