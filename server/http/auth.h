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

/* ---- failed-token limiter
 *
 * Counts the 401s (missing or unknown token) each client address earns.
 * After `failures` of them within `window_s` seconds the address is blocked
 * for one window: every request from it that needs a token is refused
 * (429) without its token being looked at, valid or not, so a guesser
 * learns nothing while blocked.  IPv6 addresses count by their /64.  The
 * table is fixed-size (AUTH_LIMIT_SLOTS addresses); when it is full the
 * stalest entry is forgotten, so a flood of addresses costs no memory.
 * One limiter per process; every function is thread-safe. */

#define AUTH_LIMIT_SLOTS 4096   /* client addresses tracked at once */

struct sockaddr;

/* Sets the limit: `failures` 401s per `window_s` seconds (0: no limit),
 * and forgets every address.  Call before the HTTP daemon starts. */
void auth_limit_init(long failures, long window_s);

/* 1 if `from` is blocked at monotonic time `now` (s), with the seconds
 * until it is let through again in `*retry_after_s` (at least 1); else 0.
 * An address that is not IPv4 or IPv6 (or NULL) is never blocked. */
int auth_limit_blocked(const struct sockaddr *from, double now, long *retry_after_s);

/* Counts one failed token attempt from `from` at monotonic time `now` (s). */
void auth_limit_failed(const struct sockaddr *from, double now);

#endif
