/* hostport.h - "host:port" and "[v6]:port" addresses, as agents advertise
 * their peer listeners and the server probes them, and the check every
 * such address passes before anything connects to it.
 *
 * Whoever names an address to shoal (an agent its peer port, the server a
 * probe target or a relay) may name one that must never be connected to:
 * a cloud metadata service (169.254.169.254), a multicast group, the
 * unspecified address.  Text is not the check: inet_aton, and so
 * getaddrinfo, read "0", "0x0", "2852039166", "0251.0376.0251.0376" and
 * "0xa9.0xfe.0xa9.0xfe" as addresses, IPv6 writes IPv4 inside itself
 * (::ffff:a.b.c.d, 64:ff9b::a.b.c.d, 2002:aabb:ccdd::), and a name may
 * resolve to anything, differently each time.  So an address is resolved
 * and every address it resolves to is checked (hostport_resolve), at the
 * moment of each connect, and the connect goes to the address checked.
 *
 * Refused: IPv4 0.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 240.0.0.0/4 (with
 * 255.255.255.255); IPv6 ::, fe80::/10, ff00::/8; and the IPv4 address
 * inside ::ffff:0:0/96 (mapped), ::/96 (compatible), 64:ff9b::/96 and
 * 64:ff9b:1::/48 (NAT64) and 2002::/16 (6to4) by the IPv4 rules.
 * Loopback and private ranges are allowed: sites and tests use them. */
#ifndef SHOAL_HOSTPORT_H
#define SHOAL_HOSTPORT_H

#include <netdb.h>
#include <stddef.h>
#include <sys/socket.h>

#define HOSTPORT_WHY_MAX 256
#define HOSTPORT_KEY_BYTES 16   /* hostport_client_key */

/* Splits addr into host (brackets removed) and port, which must be decimal
 * 0..65535.  Returns 0, or -1 when addr is not of that shape or a part
 * does not fit. */
int hostport_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len);

/* 0 when sa (AF_INET or AF_INET6) is an address shoal may connect to;
 * else 1 with its class in why ("link-local, 169.254.0.0/16, ...",
 * "multicast, 224.0.0.0/4, inside an IPv4-mapped IPv6 address").  Other
 * families are refused. */
int hostport_refused(const struct sockaddr *sa, char *why, size_t why_len);

/* The client a socket address stands for, as the key its connections
 * count under: IPv4 (also IPv4-mapped IPv6, as a dual-stack listener sees
 * IPv4 clients) as ::ffff:a.b.c.d, IPv6 cut to its /64 (one host's or
 * site's addresses).  Returns 0, or -1 for no address or another family
 * (key zeroed: every such client counts as one). */
int hostport_client_key(const struct sockaddr *sa, unsigned char key[HOSTPORT_KEY_BYTES]);

enum hostport_verdict {
    HOSTPORT_OK = 0,
    HOSTPORT_MALFORMED = -1,    /* not host:port with a port of 1..65535 */
    HOSTPORT_UNRESOLVED = -2,   /* the name does not resolve (now) */
    HOSTPORT_REFUSED = -3,      /* it resolves to an address of a refused class */
};

/* Resolves addr ("host:port", "[v6]:port"; the port decimal, 1..65535) as
 * a TCP destination and checks every address it resolves to: one refused
 * address refuses the whole name.  HOSTPORT_OK: *out holds the addresses
 * (the caller frees them with freeaddrinfo) and nothing else connects but
 * to them.  Otherwise *out is NULL and why (HOSTPORT_WHY_MAX bytes is
 * enough) says what is wrong, naming the address it resolved to. */
enum hostport_verdict hostport_resolve(const char *addr, struct addrinfo **out, char *why, size_t why_len);

#endif
