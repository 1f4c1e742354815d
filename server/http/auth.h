/* auth.h - who is calling: admin, joining agent, or a registered node.
 *
 * Admin and join tokens come from flags/env, or are generated once and kept
 * in the data directory with mode 0600.  Node tokens are issued at
 * registration and stored only as SHA-256.  All comparisons of secrets are
 * constant-time. */
#ifndef SHOAL_AUTH_H
#define SHOAL_AUTH_H

#include <stdint.h>

#include "../../common/err.h"
#include "router.h"
#include "../base/server.h"

/* Fills srv->admin_token and srv->join_token from the config, else from
 * <data-dir>/admin.token and join.token, else generates them there (printed
 * once on stderr).  Returns 0, or -1 with `err` set. */
int auth_load_tokens(struct server *srv, struct shoal_err *err);

/* With --relay: fills srv->relay_secret (the secret the server shares with
 * its relay, which signs the relay tickets of assignments and probes) from
 * --relay-secret-file, else <data-dir>/relay.secret, generating either
 * file when missing (its path printed once on stderr, with what to do with
 * it).  Without --relay: leaves it empty (len 0).  Returns 0, or -1 with
 * `err` set (a file that holds no secret of RELAY_SECRET_MIN characters). */
int auth_load_relay_secret(struct server *srv, struct shoal_err *err);

/* Checks the "Authorization: Bearer <token>" header value (may be NULL)
 * against what the route needs.  For AUTH_NODE writes the caller's node id;
 * for AUTH_ADMIN_OR_NODE the node id, or 0 for the admin.
 * Returns 0, or -1 with `err` set: 401 for a missing or unknown token, 403
 * for a valid token of the wrong kind, 503 if the database is down. */
int auth_check(struct server *srv, const char *authorization, enum auth_kind need,
               int64_t *node_id, struct shoal_err *err);

/* Looks up the node whose token is `token`: remembered for a minute once
 * the database has said (so known nodes need no database), else asked
 * there.  Returns its id, 0 if none, or -1 with `err` set when the
 * database cannot be asked (503 at once while it is failing). */
int64_t auth_node_by_token(struct server *srv, const char *token, struct shoal_err *err);

/* ---- what the server remembers per client address (auth_addr.c)
 *
 * IPv4 addresses count whole (an IPv4-mapped IPv6 address as its IPv4),
 * IPv6 addresses by their /64.  Each table is fixed-size; when it is full
 * the entry that matters least is forgotten, so a flood of addresses costs
 * no memory.  One of each per process; every function is thread-safe. */

#define AUTH_LIMIT_SLOTS 4096   /* client addresses each limiter tracks at once */

struct sockaddr;

/* -- failed-token limiter
 *
 * Counts the 401s (missing or unknown token) each client address earns.
 * After `failures` of them within `window_s` seconds the address is blocked
 * for one window: every request from it that needs a token is refused
 * (429) without its token being looked at, valid or not, so a guesser
 * learns nothing while blocked. */

/* Sets the limit: `failures` 401s per `window_s` seconds (0: no limit),
 * and forgets every address.  Call before the HTTP daemon starts. */
void auth_limit_init(long failures, long window_s);

/* 1 if `from` is blocked at monotonic time `now` (s), with the seconds
 * until it is let through again in `*retry_after_s` (at least 1); else 0.
 * An address that is not IPv4 or IPv6 (or NULL) is never blocked. */
int auth_limit_blocked(const struct sockaddr *from, double now, long *retry_after_s);

/* Counts one failed token attempt from `from` at monotonic time `now` (s). */
void auth_limit_failed(const struct sockaddr *from, double now);

/* -- registrations (--max-registrations)
 *
 * Anyone with the join token can register a node, and a node's token buys
 * it the room kept for known addresses: an address may register
 * `per_minute` nodes a minute, then waits a minute.  Loopback (the
 * server's own host: an operator, a load test) is not limited. */
#define AUTH_REGISTER_WINDOW_S 60.0

/* Sets the limit (0: none) and forgets every address.  Call before the
 * HTTP daemon starts. */
void auth_register_init(long per_minute);

/* Counts one registration from `from` at monotonic time `now` (s) and
 * returns 0, or returns -1 without counting it when the address has used
 * its registrations, with the seconds it waits in `*retry_after_s`. */
int auth_register_admit(const struct sockaddr *from, double now, long *retry_after_s);

/* -- known addresses
 *
 * An address from which a node's or the admin's token was accepted in the
 * last AUTH_KNOWN_S seconds (or a registered node's numeric peer host,
 * auth_addr_load), and loopback, is known: connection admission keeps
 * room for known addresses that strangers cannot take (http_limits.h). */
#define AUTH_KNOWN_S 900.0   /* s an address counts as known after its last valid token */

/* 1 for 127.0.0.1, ::1 and ::ffff:127.0.0.1 only (the rest of 127/8 is
 * loopback too, and counts as any other address). */
int auth_loopback(const struct sockaddr *from);

/* Marks `from` known from monotonic time `now` (s) for AUTH_KNOWN_S. */
void auth_addr_seen(const struct sockaddr *from, double now);

/* 1 if `from` is known at monotonic time `now` (s), or is loopback. */
int auth_addr_known(const struct sockaddr *from, double now);

/* Marks the numeric peer hosts of every registered node known, so that
 * after a restart the fleet is known before it is heard from (a name, or
 * a node behind NAT whose peer host is not where it connects from, waits
 * for its first heartbeat).  Returns 0, or -1 with err set when the
 * database cannot be read. */
int auth_addr_load(struct server *srv, struct shoal_err *err);

#endif
