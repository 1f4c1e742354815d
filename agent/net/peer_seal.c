/* peer_seal.c - encrypted peer connections, in one place: the seal
 * (session keys, frame counters, the send buffer) a job connection gets
 * when its handshake agreed on encryption, moving connections that own
 * one, and every step of sealing and opening a frame (format in
 * common/wire.h), which the engine in peer.c and the streams of
 * peer_stream.c call; no other peer file touches the cipher. */
#include "peer.h"

#include "peer_internal.h"

#include "../../common/aead.h"

#include <openssl/crypto.h>
#include <stdlib.h>

#define SEAL_COPY_PIECE ((size_t)64 << 10)  /* bytes sealed at a time into a frame buffer, while in L1/L2 */

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

/* ---- a frame, sealed and opened ----------------------------------------- */

static int cipher_failed(const struct peer_conn *c, struct shoal_err *err)
{
    return err_set(err, 500, "peer_io", NULL, "%s failed on the connection to peer %s", aead_name(), c->addr);
}

int peer_seal_header(struct peer_conn *c, struct wire_frame *f, unsigned char *head, struct shoal_err *err)
{
    if (wire_seal_begin(c->seal->tx, c->seal->tx_frames++, f, head) != 0)
        return cipher_failed(c, err);
    return 0;
}

int peer_seal_piece(struct peer_conn *c, unsigned char *dst, const unsigned char *src, size_t n,
                    struct shoal_err *err)
{
    return aead_update(c->seal->tx, dst, src, n) != 0 ? cipher_failed(c, err) : 0;
}

int peer_seal_tag(struct peer_conn *c, unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err)
{
    return aead_seal_end(c->seal->tx, tag) != 0 ? cipher_failed(c, err) : 0;
}

int peer_seal_frame(struct peer_conn *c, struct wire_frame *f, const void *payload, unsigned char *head,
                    unsigned char *buf, unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err)
{
    const unsigned char *src = payload;
    size_t len = (size_t)f->payload_len;
    if (peer_seal_header(c, f, head, err) != 0)
        return -1;
    for (size_t off = 0; off < len; off += SEAL_COPY_PIECE) {
        size_t k = len - off < SEAL_COPY_PIECE ? len - off : SEAL_COPY_PIECE;
        if (peer_seal_piece(c, buf + off, src + off, k, err) != 0)
            return -1;
    }
    return len ? peer_seal_tag(c, tag, err) : 0;
}

/* A sealed frame failed its tag: the connection is dead from here on. */
static int auth_failed(struct peer_conn *c, const char *what, struct shoal_err *err)
{
    c->seal->rx_failed = 1;
    return err_set(err, PEER_STATUS, "peer_auth", NULL,
                   "peer %s sent an encrypted frame whose %s failed authentication (frame %llu "
                   "of the connection: altered, replayed, reordered or not from the peer); "
                   "the connection is dropped",
                   c->addr, what, (unsigned long long)(c->seal->rx_frames - 1));
}

int peer_open_header(struct peer_conn *c, const unsigned char *head, uint64_t payload_max, struct wire_frame *f,
                     struct shoal_err *err)
{
    char why[128];
    int rc = wire_open_begin(c->seal->rx, c->seal->rx_frames++, head, payload_max, f, why, sizeof why);
    if (rc == WIRE_AUTH_FAILED)
        return auth_failed(c, "header", err);
    if (rc != 0)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL, "peer %s sent a bad frame header: %s", c->addr,
                       why);
    return 0;
}

int peer_open_piece(struct peer_conn *c, unsigned char *buf, size_t n, struct shoal_err *err)
{
    return aead_update(c->seal->rx, buf, buf, n) != 0 ? cipher_failed(c, err) : 0;
}

int peer_open_tag(struct peer_conn *c, const unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err)
{
    return aead_open_end(c->seal->rx, tag) != 0 ? auth_failed(c, "payload", err) : 0;
}
