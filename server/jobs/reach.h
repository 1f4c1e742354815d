/* reach.h - does the server reach each node's peer port from outside?
 *
 * A thread (a ticker: every REACH_TICK_S, and at once when a node
 * registers or changes its address) probes, all at once, up to
 * REACH_BATCH nodes of the fleet (not lost, not removed) whose current
 * address was never checked or not within REACH_RECHECK_S, the way a
 * neighbour would (peer_probe.h: connect, the listener's greeting, a
 * ping), and stores what it found (sql/016_reachability.sql): node_json's
 * "reachable" {from_server, why, checked_at}.  A node the server cannot
 * reach is behind NAT or a firewall, or advertises a wrong address: agents
 * outside its network cannot connect to it either.  Each change is
 * logged.  The same thread asks the server's relay whether it answers
 * (relay_check_due, relay_check.h). */
#ifndef SHOAL_REACH_H
#define SHOAL_REACH_H

#include "../../common/err.h"

#define REACH_TICK_S 5.0        /* s between looks for nodes to check */
#define REACH_RECHECK_S 60.0    /* s after which a node's port is checked again */
#define REACH_BATCH 64          /* nodes probed at once, at most */

struct server;
struct reach;

/* Starts the thread.  Returns it, or NULL with err set. */
struct reach *reach_start(struct server *srv, struct shoal_err *err);

/* Checks what is due now (a node registered or moved); NULL is ignored. */
void reach_wake(struct reach *r);

/* Stops the thread (a round of probes in progress gives up within
 * PEER_PROBE_STOP_SLICE_MS and stores nothing); NULL is ignored. */
void reach_stop(struct reach *r);

#endif
