/* hostport.c - host:port addresses (hostport.h). */
#include "hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hostport_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon[1] == '\0' || strlen(colon + 1) >= port_len)
        return -1;
    const char *h = addr;
    size_t hn = (size_t)(colon - addr);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']')
        h++, hn -= 2;
    if (hn >= host_len)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || p < 0 || p > 65535)
        return -1;
    snprintf(port, port_len, "%ld", p);
    return 0;
}

int hostport_client_key(const struct sockaddr *sa, unsigned char key[HOSTPORT_KEY_BYTES])
{
    memset(key, 0, HOSTPORT_KEY_BYTES);
    if (sa && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 0;
    }
    if (!sa || sa->sa_family != AF_INET6)
        return -1;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    memcpy(key, a->s6_addr, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
    return 0;
}

/* The class of IPv4 address b (network order) that is refused, or NULL. */
static const char *refused_v4(const unsigned char b[4])
{
    if (b[0] == 0)
        return "unspecified, 0.0.0.0/8";
    if (b[0] == 169 && b[1] == 254)
        return "link-local, 169.254.0.0/16, where clouds serve instance metadata";
    if (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255)
        return "broadcast";
    if (b[0] >= 224 && b[0] <= 239)
        return "multicast, 224.0.0.0/4";
    if (b[0] >= 240)
        return "reserved, 240.0.0.0/4";
    return NULL;
}

/* The IPv4 address an IPv6 address carries, and the form's name, or NULL. */
static const char *carried_v4(const unsigned char a[16], unsigned char v4[4])
{
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    static const unsigned char nat64_local[6] = { 0, 0x64, 0xff, 0x9b, 0, 1 };
    static const unsigned char zero[12] = { 0 };
    const char *form = NULL;
    if (memcmp(a, mapped, 12) == 0)
        form = "IPv4-mapped";
    else if (memcmp(a, zero, 12) == 0)
        form = "IPv4-compatible";
    else if (memcmp(a, nat64, 12) == 0 || memcmp(a, nat64_local, 6) == 0)
        form = "NAT64";
    if (form) {
        memcpy(v4, a + 12, 4);
        return form;
    }
    if (a[0] == 0x20 && a[1] == 0x02) {
        memcpy(v4, a + 2, 4);
        return "6to4";
    }
    return NULL;
}

int hostport_refused(const struct sockaddr *sa, char *why, size_t why_len)
{
    static const unsigned char loopback6[16] = { [15] = 1 }, zero6[16] = { 0 };
    const char *class = NULL, *form = NULL;
    unsigned char v4[4];
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
        class = "not IPv4 or IPv6";
    } else if (sa->sa_family == AF_INET) {
        class = refused_v4((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
    } else {
        const unsigned char *a = (const unsigned char *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (memcmp(a, zero6, 16) == 0)
            class = "unspecified, ::";
        else if (memcmp(a, loopback6, 16) == 0)
            class = NULL;
        else if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
            class = "link-local, fe80::/10";
        else if (a[0] == 0xff)
            class = "multicast, ff00::/8";
        else if ((form = carried_v4(a, v4)))
            class = refused_v4(v4);
    }
    if (!class)
        return 0;
    if (form)
        snprintf(why, why_len, "%s, inside an %s IPv6 address", class, form);
    else
        snprintf(why, why_len, "%s", class);
    return 1;
}

enum hostport_verdict hostport_resolve(const char *addr, struct addrinfo **out, char *why, size_t why_len)
{
    char host[256], port[8], shown[INET6_ADDRSTRLEN], class[HOSTPORT_WHY_MAX];
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *res = NULL;
    enum hostport_verdict v = HOSTPORT_OK;
    *out = NULL;
    if (hostport_split(addr, host, sizeof host, port, sizeof port) != 0 || !host[0] || strcmp(port, "0") == 0) {
        snprintf(why, why_len, "'%.100s' is not host:port with a port from 1 to 65535", addr);
        return HOSTPORT_MALFORMED;
    }
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0 || !res) {
        snprintf(why, why_len, "'%.100s' does not resolve: %s", addr, gai ? gai_strerror(gai) : "no address");
        v = HOSTPORT_UNRESOLVED;
        goto out;
    }
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (!hostport_refused(ai->ai_addr, class, sizeof class))
            continue;
        const void *bytes = ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                      : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        if (!inet_ntop(ai->ai_family, bytes, shown, sizeof shown))
            snprintf(shown, sizeof shown, "?");
        snprintf(why, why_len, "'%.60s' resolves to %s (%s), which shoal never connects to", addr, shown, class);
        v = HOSTPORT_REFUSED;
        goto out;
    }
    *out = res;
    res = NULL;
out:
    if (res)
        freeaddrinfo(res);
    return v;
}
