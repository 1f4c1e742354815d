/* peer_keys.h - how the peer tests and benchmarks key a tasklet's links:
 * as the server does (wire_link_key of a made-up job secret, for a's job,
 * epoch and role), so both ends of a link derive the same key. */
#ifndef SHOAL_TEST_PEER_KEYS_H
#define SHOAL_TEST_PEER_KEYS_H

#include <stdlib.h>
#include <string.h>

#include "../agent/net/peer.h"

/* Adds a's link to `peer` (a->role, job_id and epoch set first). */
static inline void peer_keys_link(struct peer_auth *a, const char *secret, const char *peer)
{
    unsigned char key[WIRE_KEY_BYTES];
    wire_link_key(secret, strlen(secret), a->job_id, a->epoch, a->role, peer, key);
    if (peer_auth_link(a, peer, key, sizeof key) != 0)
        abort();   /* a test's own roles are valid and few */
}

#endif
