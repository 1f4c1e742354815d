/* peer_admit.c - what the peer listener's admission needs (peer_admit.h). */
#include "peer_admit.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../common/crc32c.h"
#include "../../common/hostport.h"
#include "../../common/wire.h"

int peer_admit_has(const struct peer_hosts *h, const unsigned char key[PEER_HOST_KEY])
{
    for (int i = 0; i < h->n; i++)
        if (memcmp(h->key[i], key, PEER_HOST_KEY) == 0)
            return 1;
    return 0;
}

int peer_admit_add(struct peer_hosts *h, const char *host, struct shoal_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return err_set(err, 400, "invalid_address", NULL, "cannot resolve the peer host '%s': %s", host,
                       gai_strerror(rc));
    for (const struct addrinfo *ai = res; ai && h->n < PEER_HOSTS_MAX; ai = ai->ai_next) {
        struct sockaddr_storage ss = { 0 };
        unsigned char key[PEER_HOST_KEY];
        if (ai->ai_addrlen > sizeof ss)
            continue;
        memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
        hostport_client_key((const struct sockaddr *)&ss, key);
        if (!peer_admit_has(h, key))
            memcpy(h->key[h->n++], key, PEER_HOST_KEY);
    }
    freeaddrinfo(res);
    return 0;
}

int peer_admit_add_peers(struct peer_hosts *h, const char *const *addrs, int n, struct shoal_err *err)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char host[256], port[8];
        struct shoal_err e;
        if (!addrs[i] || !addrs[i][0])
            continue;
        if (hostport_split(addrs[i], host, sizeof host, port, sizeof port) != 0)
            err_set(&e, 400, "invalid_address", NULL, "the peer address '%s' is not host:port", addrs[i]);
        else if (peer_admit_add(h, host, &e) == 0)
            continue;
        if (rc == 0)
            *err = e;
        rc = -1;
    }
    return rc;
}

int peer_admit_add_url(struct peer_hosts *h, const char *url, struct shoal_err *err)
{
    char host[256];
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n;
    if (*p == '[') {   /* [v6]:port */
        const char *close = strchr(p, ']');
        n = close ? (size_t)(close - p - 1) : 0;
        p++;
    } else {
        n = strcspn(p, ":/?#");
    }
    if (n == 0 || n >= sizeof host)
        return err_set(err, 400, "invalid_address", NULL, "the URL '%s' names no host", url);
    memcpy(host, p, n);
    host[n] = '\0';
    return peer_admit_add(h, host, err);
}

void peer_admit_busy(int fd, const char *why)
{
    unsigned char out[2 * WIRE_HEADER_BYTES + WIRE_NONCE_BYTES + 128] = { 0 };
    size_t len = strnlen(why, 128);
    struct wire_frame hello = {.kind = WIRE_HELLO, .dtype = WIRE_BYTES, .payload_len = WIRE_NONCE_BYTES,
                               .payload_crc = crc32c(0, out + WIRE_HEADER_BYTES, WIRE_NONCE_BYTES)};
    struct wire_frame error = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES, .payload_len = len,
                               .payload_crc = crc32c(0, why, len)};
    wire_header_encode(&hello, out);   /* the nonce after it: zeros, never used */
    wire_header_encode(&error, out + WIRE_HEADER_BYTES + WIRE_NONCE_BYTES);
    memcpy(out + 2 * WIRE_HEADER_BYTES + WIRE_NONCE_BYTES, why, len);
    (void)send(fd, out, 2 * WIRE_HEADER_BYTES + WIRE_NONCE_BYTES + len, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}

