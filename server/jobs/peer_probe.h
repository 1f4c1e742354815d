/* peer_probe.h - does a node's peer listener answer?  The server asks it
 * the way a neighbour would: connect to its peer address, read the
 * listener's greeting (a HELLO frame), send a PING and read the PONG (the
 * probe session of agent/net/peer.h).  A node that is gone refuses the
 * connection; one that is partitioned or frozen (SIGSTOP: the kernel still
 * accepts) does not answer in time; one whose handshake slots are all
 * taken (a flood of silent connections) greets and says "busy", which is
 * an answer: it is alive.  recovery.c uses it to judge a failure report:
 * which node of the plan is at fault; reach.c to tell whether each node
 * accepts connections from outside its network at all. */
#ifndef SHOAL_PEER_PROBE_H
#define SHOAL_PEER_PROBE_H

/* ms a probe may take in all, connect to PONG.  A healthy listener answers
 * in about a millisecond on a LAN; a round trip across the world is
 * 0.3 s, and a busy agent's handshake thread still answers in well under a
 * second. */
#define PEER_PROBE_TIMEOUT_MS 3000
#define PEER_PROBE_WHY_MAX 256   /* HOSTPORT_WHY_MAX: a refused address says why */

/* What a probe found. */
#define PEER_PROBE_ANSWERED 1
#define PEER_PROBE_SILENT 0     /* no answer in time, no route, or not a shoal peer */
#define PEER_PROBE_REFUSED (-1) /* the host refused the connection: nothing listens, the agent is gone */

/* Probes addrs[0..n) ("host:port") all at once, within timeout_ms.  Sets
 * ok[i] to PEER_PROBE_ANSWERED when addrs[i] answered, else to SILENT or
 * REFUSED with the reason in why[i].
 * Blocks for up to timeout_ms (plus name resolution): for the recovery
 * thread, never an HTTP one. */
void peer_probe_all(const char *const *addrs, int n, int timeout_ms, int *ok, char (*why)[PEER_PROBE_WHY_MAX]);

/* peer_probe_all that also gives up (the probes still open SILENT) once
 * stop(arg) returns non-zero, asked every PEER_PROBE_STOP_SLICE_MS. */
#define PEER_PROBE_STOP_SLICE_MS 100
void peer_probe_all_until(const char *const *addrs, int n, int timeout_ms, int *ok, char (*why)[PEER_PROBE_WHY_MAX],
                          int (*stop)(void *arg), void *arg);

/* Does the relay at addr ("host:port", shoal-relay) answer?  Connects and
 * asks GET /healthz, which the relay serves on the port its agents dial;
 * PEER_PROBE_ANSWERED on a 200 within timeout_ms, else SILENT or REFUSED
 * (nothing listens: the relay is down) with the reason in why.  Blocks
 * for up to timeout_ms: for the recovery thread, never an HTTP one. */
int peer_probe_relay(const char *addr, int timeout_ms, char why[PEER_PROBE_WHY_MAX]);

#endif
