/* peer_seal.c - encrypted peer connections: the seal (session keys, frame
 * counters, the send buffer) a job connection gets when its handshake
 * agreed on encryption, and moving connections that own one.  The frames
 * themselves are sealed and opened by the engine in peer.c (format in
 * common/wire.h). */
#include "peer.h"

#include "peer_internal.h"

#include "../../common/aead.h"

#include <openssl/crypto.h>
#include <stdlib.h>

void peer_seal_free(struct peer_seal *s)
{
    if (!s)
        return;
    aead_free(s->tx);
    aead_free(s->rx);
    free(s->scratch);
    free(s);
}

void peer_conn_move(struct peer_conn *dst, struct peer_conn *src)
{
    *dst = *src;
    src->fd = -1;
    src->seal = NULL;
}

int peer_seal_start(struct peer_conn *c, const struct peer_auth *a, const struct peer_link *link,
                    const unsigned char lnonce[WIRE_NONCE_BYTES],
                    const unsigned char dnonce[WIRE_NONCE_BYTES], const char *dialer_role,
                    const char *listener_role, int dialer, struct shoal_err *err)
{
    unsigned char d2l[WIRE_KEY_BYTES], l2d[WIRE_KEY_BYTES];
    struct peer_seal *s = calloc(1, sizeof *s);
    int rc = -1;

    if (!s || !(s->scratch = malloc(PEER_SEAL_PIECE))) {
        err_set(err, 500, "peer_io", NULL, "out of memory encrypting the connection to %s",
                c->addr);
        goto out;
    }
    if (wire_session_keys(link->key, link->key_len, lnonce, dnonce, a->job_id, a->epoch,
                          dialer_role, listener_role, d2l, l2d) != 0) {
        err_set(err, 500, "peer_auth", NULL,
                "cannot derive the session keys of the connection to %s (empty link key?)",
                c->addr);
        goto out;
    }
    s->tx = aead_new(dialer ? d2l : l2d, 1);
    s->rx = aead_new(dialer ? l2d : d2l, 0);
    if (!s->tx || !s->rx) {
        err_set(err, 500, "peer_auth", NULL, "cannot set up %s for the connection to %s",
                aead_name(), c->addr);
        goto out;
    }
    peer_seal_free(c->seal);
    c->seal = s;
    s = NULL;
    rc = 0;
out:
    OPENSSL_cleanse(d2l, sizeof d2l);
    OPENSSL_cleanse(l2d, sizeof l2d);
    peer_seal_free(s);
    return rc;
}
