/* hostport.h - "host:port" and "[v6]:port" addresses, as agents advertise
 * their peer listeners and the server probes them. */
#ifndef SHOAL_HOSTPORT_H
#define SHOAL_HOSTPORT_H

#include <stddef.h>

/* Splits addr into host (brackets removed) and port, which must be decimal
 * 0..65535.  Returns 0, or -1 when addr is not of that shape or a part
 * does not fit. */
int hostport_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len);

#endif
