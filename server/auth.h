/* auth.h - who is calling: admin, joining agent, or a registered node.
 *
 * Admin and join tokens come from flags/env, or are generated once and kept
 * in the data directory with mode 0600.  Node tokens are issued at
 * registration and stored only as SHA-256.  All comparisons of secrets are
 * constant-time. */
#ifndef SHOAL_AUTH_H
#define SHOAL_AUTH_H

#include <stdint.h>

#include "../common/err.h"
#include "router.h"
#include "server.h"

/* Fills srv->admin_token and srv->join_token from the config, else from
 * <data-dir>/admin.token and join.token, else generates them there (printed
 * once on stderr).  Returns 0, or -1 with `err` set. */
int auth_load_tokens(struct server *srv, struct shoal_err *err);

/* Checks the "Authorization: Bearer <token>" header value (may be NULL)
 * against what the route needs.  For AUTH_NODE writes the caller's node id;
 * for AUTH_ADMIN_OR_NODE the node id, or 0 for the admin.
 * Returns 0, or -1 with `err` set: 401 for a missing or unknown token, 403
 * for a valid token of the wrong kind, 503 if the database is down. */
int auth_check(struct server *srv, const char *authorization, enum auth_kind need,
               int64_t *node_id, struct shoal_err *err);

/* Looks up the node whose token hashes to `token_hash`.  Returns its id, 0 if
 * none, or -1 with `err` set when the database cannot be asked. */
int64_t auth_node_by_token(struct server *srv, const char *token, struct shoal_err *err);

#endif
