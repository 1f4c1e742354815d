#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/log.h"
#include "../../common/clock.h"
#include "../store/db.h"

/* Reads the secret at `path`, or creates it with a fresh one, `prefix`
 * and 64 random hex digits (mode 0600); `what` names it in messages
 * ("admin token").  *made: 1 when it was created. */
static int auth_secret_file(const char *path, const char *prefix, const char *what, char *out, size_t n,
                            int *made, struct shoal_err *err)
{
    int rc = -1, fd = -1;
    *made = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, out, n - 1);
        if (got <= 0) {
            err_set(err, 500, "bad_token_file", NULL, "cannot read %s; delete it to make a new %s", path, what);
            goto out;
        }
        out[got] = '\0';
        out[strcspn(out, "\r\n")] = '\0';
        if (!token_well_formed(out)) {
            err_set(err, 500, "bad_token_file", NULL, "%s does not hold a %s; delete it to make a new one", path,
                    what);
            goto out;
        }
        rc = 0;
        goto out;
    }
    if (errno != ENOENT) {
        err_set(err, 500, "bad_token_file", NULL, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (token_generate(prefix, out, n) != 0) {
        err_set(err, 500, "no_randomness", NULL, "cannot generate a new %s", what);
        goto out;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t len = strlen(out);
    if (fd < 0 || write(fd, out, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
        err_set(err, 500, "bad_token_file", NULL, "cannot write %s: %s", path, strerror(errno));
        unlink(path);
        goto out;
    }
    /* The secret itself is never logged: logs travel further than the file. */
    fprintf(stderr, "shoal-server: generated a new %s into %s\n", what, path);
    *made = 1;
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Reads a token file, or creates it with a fresh token.  `kind` is "admin"
 * or "join". */
static int auth_token_file(const char *data_dir, const char *kind, char *out, size_t n, struct shoal_err *err)
{
    char path[4096], prefix[32], what[32];
    int made;
    snprintf(path, sizeof path, "%s/%s.token", data_dir, kind);
    snprintf(prefix, sizeof prefix, "shoal_%s_", kind);
    snprintf(what, sizeof what, "%s token", kind);
    return auth_secret_file(path, prefix, what, out, n, &made, err);
}

int auth_load_relay_secret(struct server *srv, struct shoal_err *err)
{
    char path[PATH_MAX + 16], text[TOKEN_MAX];
    struct shoal_err why;
    int made, rc = -1;
    memset(&srv->relay_secret, 0, sizeof srv->relay_secret);
    if (!srv->cfg.relay[0])
        return 0;
    if (srv->cfg.relay_secret_file[0])
        snprintf(path, sizeof path, "%s", srv->cfg.relay_secret_file);
    else
        snprintf(path, sizeof path, "%s/relay.secret", srv->cfg.data_dir);
    if (auth_secret_file(path, "shoal_relay_", "relay secret", text, sizeof text, &made, err) != 0)
        goto out;
    if (relay_secret_set(text, &srv->relay_secret, &why) != 0) {
        err_set(err, 2, "invalid_config", "relay_secret_file", "%s does not hold a relay secret: %s", path,
                why.message);
        goto out;
    }
    if (made)
        fprintf(stderr, "shoal-server: give %s to shoal-relay %s (--secret-file): it pairs only the links this "
                        "server's tickets admit\n", path, srv->cfg.relay);
    rc = 0;
out:
    OPENSSL_cleanse(text, sizeof text);
    return rc;
}

int auth_load_tokens(struct server *srv, struct shoal_err *err)
{
    struct { const char *kind; const char *given; char *dst; } t[] = {
        { "admin", srv->cfg.admin_token, srv->admin_token },
        { "join", srv->cfg.join_token, srv->join_token },
    };
    for (size_t i = 0; i < 2; i++) {
        if (t[i].given[0]) {
            if (!token_well_formed(t[i].given))
                return err_set(err, 2, "invalid_config", t[i].kind,
                               "the %s token must be 1-127 printable characters without spaces", t[i].kind);
            snprintf(t[i].dst, TOKEN_MAX, "%s", t[i].given);
        } else if (auth_token_file(srv->cfg.data_dir, t[i].kind, t[i].dst, TOKEN_MAX, err) != 0) {
            return -1;
        }
    }
    if (token_equal(srv->admin_token, srv->join_token))
        return err_set(err, 2, "invalid_config", "join_token", "the admin and join tokens must differ");
    return 0;
}

/* ---- known node tokens
 *
 * Tokens are checked when a request's headers arrive, on the thread that
 * takes connections, before any body is read (http.c): a node's token
 * found in the database is remembered here for AUTH_NODE_CACHE_S, so the
 * fleet's heartbeats and polls need no database on that thread (and still
 * pass while it is frozen).  One slot per hash value: a collision only
 * costs a lookup. */
#define AUTH_NODE_CACHE_SLOTS 8192
#define AUTH_NODE_CACHE_S 60.0   /* s a node token found in the database counts as known */

static struct {
    pthread_mutex_t mu;
    struct { char hash[TOKEN_HASH_HEX]; int64_t id; double until; } slot[AUTH_NODE_CACHE_SLOTS];
} auth_known = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* The slot of a token hash (FNV-1a of its hex digits). */
static size_t auth_slot(const char *hash)
{
    uint32_t h = 2166136261u;
    for (const char *p = hash; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % AUTH_NODE_CACHE_SLOTS;
}

/* The node of a known token hash, or 0. */
static int64_t auth_known_node(const char *hash)
{
    size_t i = auth_slot(hash);
    int64_t id = 0;
    pthread_mutex_lock(&auth_known.mu);
    if (auth_known.slot[i].id > 0 && auth_known.slot[i].until > mono_s() &&
        memcmp(auth_known.slot[i].hash, hash, TOKEN_HASH_HEX) == 0)
        id = auth_known.slot[i].id;
    pthread_mutex_unlock(&auth_known.mu);
    return id;
}

static void auth_remember_node(const char *hash, int64_t id)
{
    size_t i = auth_slot(hash);
    pthread_mutex_lock(&auth_known.mu);
    memcpy(auth_known.slot[i].hash, hash, TOKEN_HASH_HEX);
    auth_known.slot[i].id = id;
    auth_known.slot[i].until = mono_s() + AUTH_NODE_CACHE_S;
    pthread_mutex_unlock(&auth_known.mu);
}

int64_t auth_node_by_token(struct server *srv, const char *token, struct shoal_err *err)
{
    char hash[TOKEN_HASH_HEX];
    int64_t id = -1;
    token_sha256_hex(token, strlen(token), hash);
    int64_t known = auth_known_node(hash);
    if (known > 0)
        return known;
    /* A database that is failing answers an unknown token 503 at once
     * rather than on the thread that takes connections at its timeout. */
    if (db_pool_troubled(srv->db)) {
        err_set(err, 503, "database_unavailable", NULL,
                "the database is unavailable, and this token is not one this server knows without it; retry later");
        return -1;
    }
    const char *params[1] = { hash };
    PGresult *r = NULL;
    PGconn *c = db_acquire(srv->db, err);
    if (!c)
        goto out;
    r = db_exec(c, "SELECT id FROM nodes WHERE token_hash = $1", 1, params, err);
    if (!r)
        goto out;
    id = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    if (id > 0)
        auth_remember_node(hash, id);
out:
    PQclear(r);
    db_release(srv->db, c);
    return id;
}

/* What a route wants, and where an operator finds it. */
static const char *const token_wanted[] = {
    [AUTH_OPEN] = "no token",
    [AUTH_ADMIN] = "the admin token (the server's <data-dir>/admin.token, or --admin-token)",
    [AUTH_JOIN] = "the join token (the server's <data-dir>/join.token, or --join-token)",
    [AUTH_NODE] = "a node's token (the one shoal-agent got when it registered, kept in its <data-dir>/node.json)",
    [AUTH_ADMIN_OR_NODE] = "the admin token or a node's token",
};

int auth_check(struct server *srv, const char *authorization, enum auth_kind need,
               int64_t *node_id, struct shoal_err *err)
{
    const char *token = NULL;
    if (need == AUTH_OPEN)
        return 0;
    if (authorization && strncasecmp(authorization, "Bearer ", 7) == 0)
        token = authorization + 7;
    if (!token || !token_well_formed(token))
        return err_set(err, 401, "unauthorized", NULL,
                       "send 'Authorization: Bearer <token>' with the %s token",
                       need == AUTH_ADMIN ? "admin" : need == AUTH_JOIN ? "join" :
                       need == AUTH_NODE ? "node" : "admin or a node");
    int is_admin = token_equal(token, srv->admin_token);
    int is_join = token_equal(token, srv->join_token);
    if (((need == AUTH_ADMIN || need == AUTH_ADMIN_OR_NODE) && is_admin) || (need == AUTH_JOIN && is_join)) {
        *node_id = 0;
        return 0;
    }
    int64_t id = 0;
    if (!is_admin && !is_join) {
        id = auth_node_by_token(srv, token, err);
        if (id < 0)
            return -1;
    }
    if ((need == AUTH_NODE || need == AUTH_ADMIN_OR_NODE) && id > 0) {
        *node_id = id;
        return 0;
    }
    if (is_admin || is_join || id > 0)
        return err_set(err, 403, "forbidden", NULL, "this endpoint takes %s; this is %s", token_wanted[need],
                       is_admin ? "the admin token" : is_join ? "the join token" : "a node's token");
    return err_set(err, 401, "unauthorized", NULL,
                   "unknown token: not the admin token, the join token or a registered node's; this endpoint "
                   "takes %s", token_wanted[need]);
}
