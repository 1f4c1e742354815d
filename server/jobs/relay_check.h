/* relay_check.h - does the server's relay (--relay) answer?
 *
 * A relay that is down fails every link that goes through it, and nothing
 * else says so until a job dials one: so the server asks it itself, at
 * start-up (a warning in the log naming it when it does not answer), every
 * RELAY_CHECK_EVERY_S from the reachability thread (reach.h; each change
 * logged), and when a plan is made (planner.c: a plan that needs the relay
 * while it does not answer is refused, naming it).  The question is the
 * relay's own GET /healthz on its port (relay/relay.c), asked by
 * peer_probe_relay (peer_probe.h).  What the agents find when they probe it is kept apart
 * (relay_reach, 020_plan_visible.sql): the relay may answer the server and
 * not a site behind NAT.  /metrics shows both (shoal_relay_up,
 * shoal_relay_unreachable_nodes). */
#ifndef SHOAL_RELAY_CHECK_H
#define SHOAL_RELAY_CHECK_H

#include <stddef.h>

#include "peer_probe.h"

struct db_pool;
struct shoal_err;

#define RELAY_CHECK_TIMEOUT_MS 3000   /* ms for connect, ask and answer */
#define RELAY_CHECK_EVERY_S 10.0      /* s between the reachability thread's checks */
#define RELAY_CHECK_WHY_MAX PEER_PROBE_WHY_MAX   /* the probe's reason (peer_probe_relay) */

struct relay_check;

/* What the server knows of its relay.  Owned by the caller of
 * relay_check_new; NULL (no --relay) is accepted everywhere and means
 * "no relay". */
struct relay_check *relay_check_new(const char *relay);
void relay_check_free(struct relay_check *rc);

/* Asks the relay now (blocks up to RELAY_CHECK_TIMEOUT_MS: never on an HTTP
 * thread that must not wait), stores and logs what changed: the first
 * answer that is not one is a warning naming the relay.  Returns 1 when it
 * answered, 0 when not (NULL: -1). */
int relay_check_now(struct relay_check *rc);

/* relay_check_now when the last check is older than RELAY_CHECK_EVERY_S. */
void relay_check_due(struct relay_check *rc);

/* The last check: 1 answered, 0 did not (why it did not into why), -1 no
 * relay or not checked yet. */
int relay_check_state(struct relay_check *rc, char *why, size_t why_len);

/* Once after each return of the relay (it answered a check after one it
 * did not): forgets the agents' failed probes of it (relay_reach), made
 * while it was down, so that their links may go through it again (their
 * next probes say again; a site that cannot reach it reports so anew).
 * 0, or -1 with e set when the database did not take it (tried again at
 * the next call). */
int relay_check_forget_failures(struct relay_check *rc, struct db_pool *db, struct shoal_err *e);

/* The relay's address (host:port), or NULL for none. */
const char *relay_check_address(const struct relay_check *rc);

#endif
