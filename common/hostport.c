/* hostport.c - host:port addresses (hostport.h). */
#include "hostport.h"

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
