#include "config.h"

#include "../../common/opts.h"
#include "../../common/patience.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define STR(field) OPT_STR_FIELD(struct config, field)
#define LONG(field, lo, hi) OPT_LONG_FIELD(struct config, field, lo, hi)
#define DEFAULT_(n) #n
#define DEFAULT(n) DEFAULT_(n)   /* a number of patience.h as the table's default text */

_Static_assert(PATIENCE_DB_TIMEOUT_MAX_S == 10, "--db-timeout's help says 10: the largest that fits (patience.h)");

static const struct opt opts[] = {
    { "--listen", "SHOAL_LISTEN", STR(listen_addr), "127.0.0.1",
      "address to serve HTTP on (0.0.0.0 for all interfaces)" },
    { "--port", "SHOAL_PORT", LONG(port, 0, 65535), "8080",
      "HTTP port; 0 picks a free port and writes it to <data-dir>/server.port" },
    { "--database-url", "SHOAL_DATABASE_URL", STR(database_url), "",
      "PostgreSQL conninfo or URL; empty starts an embedded Postgres in <data-dir>/pg" },
    { "--data-dir", "SHOAL_DATA_DIR", STR(data_dir), "./shoal-data",
      "directory for tokens, the embedded database and the port file" },
    { "--admin-token", "SHOAL_ADMIN_TOKEN", STR(admin_token), "",
      "bearer token for operator endpoints; empty: generated once into <data-dir>/admin.token" },
    { "--join-token", "SHOAL_JOIN_TOKEN", STR(join_token), "",
      "bearer token agents register with; empty: generated once into <data-dir>/join.token" },
    { "--log-level", "SHOAL_LOG_LEVEL", STR(log_level), "info", "debug, info, warn or error" },
    { "--pg-bin", "SHOAL_PG_BIN", STR(pg_bin), "",
      "directory with initdb and pg_ctl for the embedded database; empty: search" },
    { "--pg-user", "SHOAL_PG_USER", STR(pg_user), "postgres",
      "account the embedded Postgres runs as when shoal-server runs as root" },
    { "--threads", "SHOAL_THREADS", LONG(threads, 1, 256), "8",
      "HTTP threads that take connections and answer what needs no database" },
    { "--db-pool", "SHOAL_DB_POOL", LONG(db_pool, 1, 256), "8",
      "database connections this server keeps, and as many workers for the routes that need them" },
    { "--db-timeout", "SHOAL_DB_TIMEOUT", LONG(db_timeout_s, 1, 3600), DEFAULT(PATIENCE_DB_TIMEOUT_S),
      "seconds a database statement may run (statement_timeout); a database that has not answered 2 s "
      "later (frozen, or the network to it black-holed) costs the request a 503 and the connection is "
      "reopened.  Agents wait " DEFAULT(PATIENCE_AGENT_CALL_S) " s for an answer: above 10 they time out "
      "before the 503 arrives (a warning at start-up)" },
    { "--max-body", "SHOAL_MAX_BODY", LONG(max_body, 1024, 1L << 30), "1048576",
      "largest request body accepted, bytes (larger: 413)" },
    { "--heartbeat-timeout", "SHOAL_HEARTBEAT_TIMEOUT", LONG(heartbeat_timeout, 1, 86400),
      DEFAULT(PATIENCE_HEARTBEAT_TIMEOUT_S),
      "seconds since a node's last heartbeat after which it is lost: the scheduler leaves it out and its "
      "job is re-planned; keep it above --db-timeout + 2 s + the agents' --heartbeat-interval (a warning "
      "at start-up otherwise)" },
    { "--max-recoveries", "SHOAL_MAX_RECOVERIES", LONG(max_recoveries, 0, 1000000), "10",
      "times a job is re-planned after a failure or a lost node before it fails for good" },
    { "--max-long-polls", "SHOAL_MAX_LONG_POLLS", LONG(max_long_polls, 0, 1000000), "4096",
      "assignment long-polls this server holds at once; beyond it they are answered without waiting" },
    { "--max-connections", "SHOAL_MAX_CONNECTIONS", LONG(max_connections, 0, 1000000), "0",
      "HTTP connections held at once, clipped to the open-file limit; more are closed on accept; "
      "0: --max-long-polls + 1024" },
    { "--max-connections-per-address", "SHOAL_MAX_CONNECTIONS_PER_ADDRESS",
      LONG(max_connections_per_address, 0, 1000000), "4096",
      "HTTP connections one client address may hold at once (agents behind one NAT share one; each "
      "agent holds about 2); more are closed on accept; 0: no limit" },
    { "--idle-timeout", "SHOAL_IDLE_TIMEOUT", LONG(idle_timeout_s, 1, 86400), "60",
      "seconds a connection may send nothing before it is closed (a waiting long-poll is exempt)" },
    { "--request-timeout", "SHOAL_REQUEST_TIMEOUT", LONG(request_timeout_s, 1, 86400), "30",
      "seconds from a request's headers to the end of its body; a body still arriving then is dropped "
      "(checkpoint uploads are exempt), and so is a connection whose request head is still arriving "
      "--idle-timeout + this after it opened or its last answer" },
    { "--connection-memory", "SHOAL_CONNECTION_MEMORY", LONG(connection_memory, 8192, 1L << 24), "32768",
      "bytes each connection may use for its request line, headers and read buffer; a request head "
      "that does not fit is answered 431 (a too long URL 414)" },
    { "--auth-failures", "SHOAL_AUTH_FAILURES", LONG(auth_failures, 0, 1000000), "100",
      "failed token attempts (401) one address may make in --auth-failure-window; then every request "
      "needing a token from it is answered 429 for one window; 0: no limit" },
    { "--auth-failure-window", "SHOAL_AUTH_FAILURE_WINDOW", LONG(auth_failure_window_s, 1, 86400), "60",
      "seconds over which --auth-failures are counted, and that a blocked address waits" },
    { "--max-registrations", "SHOAL_MAX_REGISTRATIONS", LONG(max_registrations, 0, 1000000), "60",
      "nodes one client address may register a minute (POST /v1/agent/register with the join token); "
      "then 429 for a minute; loopback (127.0.0.1, ::1) is not limited; 0: no limit" },
    { "--max-checkpoint-bytes", "SHOAL_MAX_CHECKPOINT_BYTES", LONG(max_checkpoint_bytes, 1, 1L << 50),
      "8589934592", "largest checkpoint stage file accepted, bytes (larger: 413)" },
    { "--checkpoint-dir", "SHOAL_CHECKPOINT_DIR", STR(checkpoint_dir), "",
      "directory of the checkpoint store; servers sharing one database must share it too (a mount "
      "every one of them sees at the same path); empty: <data-dir>/checkpoints" },
    { "--checkpoint-keep", "SHOAL_CHECKPOINT_KEEP", LONG(checkpoint_keep, 1, 1000000), "3",
      "complete checkpoints of each job kept, the newest; older ones are deleted once a newer one is complete" },
    { "--checkpoint-keep-every", "SHOAL_CHECKPOINT_KEEP_EVERY", LONG(checkpoint_keep_every, 0, 1L << 40), "0",
      "also keep every checkpoint whose step is a multiple of this; 0: none" },
    { "--relay", "SHOAL_RELAY", STR(relay), "",
      "host:port of a shoal-relay that every agent can reach: two nodes that cannot connect to each "
      "other either way (behind NAT, closed firewalls) are joined through it; empty: such pairs are "
      "avoided" },
    { "--relay-secret-file", "SHOAL_RELAY_SECRET_FILE", STR(relay_secret_file), "",
      "file of the secret shared with --relay, which signs the relay tickets of assignments and probes "
      "(shoal-relay --secret-file reads the same file); generated when missing; empty: "
      "<data-dir>/relay.secret" },
    { "--relay-ticket-ttl", "SHOAL_RELAY_TICKET_TTL", LONG(relay_ticket_ttl_s, 60, 31536000), "86400",
      "seconds a relay ticket in an assignment admits its end of a link (checked when the end reaches the "
      "relay, not while the link runs); a tasklet whose ticket expired before it connected fails, and the "
      "recovery's new epoch brings new tickets" },
    { "--link-stale", "SHOAL_LINK_STALE", LONG(link_stale_s, 1, 31536000), "600",
      "seconds after which a measured link is handed to its agent to probe again" },
    { "--tls-cert", "SHOAL_TLS_CERT", STR(tls_cert), "",
      "PEM certificate (chain) to serve HTTPS with; empty: plain HTTP (put a TLS proxy in front)" },
    { "--tls-key", "SHOAL_TLS_KEY", STR(tls_key), "", "PEM private key of --tls-cert, unencrypted (chmod 600)" },
};

#define N_OPTS (sizeof opts / sizeof opts[0])

void config_usage(FILE *out)
{
    fprintf(out, "usage: shoal-server [options]\n\n"
                 "The shoal control plane: a REST API whose only state is PostgreSQL.\n"
                 "Every option can also be set by its environment variable; flags win.\n\n");
    opts_usage(opts, N_OPTS, out);
}

int config_load(struct config *cfg, int argc, char **argv, struct shoal_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    int rc = opts_load(opts, N_OPTS, cfg, argc, argv, 1, err);
    if (rc == 1)
        config_usage(stdout);
    if (rc == 0 && !cfg->checkpoint_dir[0]) {
        int n = snprintf(cfg->checkpoint_dir, sizeof cfg->checkpoint_dir, "%s/checkpoints", cfg->data_dir);
        if (n < 0 || (size_t)n >= sizeof cfg->checkpoint_dir)
            return err_set(err, 2, "invalid_value", "data_dir", "--data-dir is too long");
    }
    return rc;
}

/* Appends one warning to w[*n] when `contradicts`; printf-style text. */
static void contradiction(int contradicts, char w[][CONFIG_WARNING_MAX], int *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void contradiction(int contradicts, char w[][CONFIG_WARNING_MAX], int *n, const char *fmt, ...)
{
    if (!contradicts || *n >= CONFIG_WARNINGS_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w[(*n)++], CONFIG_WARNING_MAX, fmt, ap);
    va_end(ap);
}

int config_contradictions(const struct config *cfg, char warnings[][CONFIG_WARNING_MAX])
{
    int n = 0;
    long answer = PATIENCE_SERVER_ANSWER_S(cfg->db_timeout_s);   /* s: the slowest answer, a 503 */
    contradiction(cfg->db_timeout_s > PATIENCE_DB_TIMEOUT_MAX_S, warnings, &n,
                  "--db-timeout %ld s: a request the database does not serve is answered 503 after %ld s, but "
                  "agents wait %d s for an answer (%d s of it slack): during a database stall they time out "
                  "first and see a server that is gone; give --db-timeout %d or less",
                  cfg->db_timeout_s, answer, PATIENCE_AGENT_CALL_S, PATIENCE_MARGIN_S, PATIENCE_DB_TIMEOUT_MAX_S);
    contradiction(answer + PATIENCE_HEARTBEAT_INTERVAL_S >= cfg->heartbeat_timeout, warnings, &n,
                  "--heartbeat-timeout %ld s is not above --db-timeout + %d s (%ld s) plus an agent's heartbeat "
                  "interval (%d s by default): a node whose heartbeat the database serves slowly, within "
                  "--db-timeout, is taken for lost and its job re-planned; give --heartbeat-timeout %ld or more",
                  cfg->heartbeat_timeout, PATIENCE_DB_GRACE_S, answer, PATIENCE_HEARTBEAT_INTERVAL_S,
                  answer + PATIENCE_HEARTBEAT_INTERVAL_S + 1);
    contradiction(cfg->max_connections > 0 && cfg->max_connections <= cfg->max_long_polls, warnings, &n,
                  "--max-connections %ld is not above --max-long-polls %ld: waiting long-polls can hold every "
                  "connection, and the agents' heartbeats and reports are then closed on accept; give "
                  "--max-connections above it (0: --max-long-polls + 1024)",
                  cfg->max_connections, cfg->max_long_polls);
    return n;
}
