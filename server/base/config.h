/* config.h - shoal-server settings from flags and SHOAL_* environment.
 *
 * Precedence: built-in default < environment variable < command-line flag.
 * Every setting is listed once, in config.c's table, which also prints
 * --help, so the help can never disagree with what is parsed. */
#ifndef SHOAL_CONFIG_H
#define SHOAL_CONFIG_H

#include <limits.h>
#include <stdio.h>

#include "../../common/err.h"
#include "../../common/token.h"

struct config {
    char listen_addr[64];       /* IPv4/IPv6 address to bind, e.g. 127.0.0.1 */
    long port;                  /* TCP port; 0 picks a free one (written to <data-dir>/server.port) */
    char database_url[1024];    /* libpq conninfo or URL; "" = embedded Postgres */
    char data_dir[PATH_MAX];    /* tokens, embedded cluster, port file */
    char admin_token[TOKEN_MAX];
    char join_token[TOKEN_MAX];
    char log_level[16];         /* debug, info, warn, error */
    char pg_bin[PATH_MAX];      /* directory with initdb/pg_ctl; "" = search */
    char pg_user[64];           /* account the embedded Postgres runs as under root */
    long threads;               /* HTTP worker threads */
    long db_pool;               /* database connections per server */
    long db_timeout_s;          /* s: statement_timeout; the server waits 2 s longer (common/patience.h) */
    char checkpoint_dir[PATH_MAX]; /* the checkpoint store; default <data-dir>/checkpoints */
    long checkpoint_keep;       /* newest complete checkpoints kept per job */
    long checkpoint_keep_every; /* steps; also kept: multiples of it (0: none) */
    long max_body;              /* request body cap, bytes */
    long heartbeat_timeout;     /* s without a heartbeat before a node is lost (not offered, its job re-planned) */
    long max_recoveries;        /* re-plans after failures before a job fails */
    long max_long_polls;        /* assignment long-polls held at once; more are answered at once */
    long max_connections;       /* HTTP connections held at once; 0 = max_long_polls + 1024 */
    long max_connections_per_address; /* connections one client address may hold; 0 = no limit */
    long idle_timeout_s;        /* s a connection may send nothing (suspended long-polls exempt) */
    long request_timeout_s;     /* s from a request's headers to the end of its buffered body */
    long connection_memory;     /* bytes per connection for request line, headers, read buffer */
    long auth_failures;         /* 401s one address may earn per window before 429; 0 = no limit */
    long auth_failure_window_s; /* s over which auth_failures count, and a block lasts */
    long max_registrations;     /* nodes one address may register a minute; 0 = no limit */
    long max_checkpoint_bytes;  /* largest checkpoint stage file accepted, bytes */
    long link_stale_s;          /* s after which a measured link is offered for probing again */
    char tls_cert[PATH_MAX];    /* PEM certificate chain for HTTPS; "" = plain HTTP */
    char tls_key[PATH_MAX];     /* PEM private key of tls_cert */
    char relay[256];            /* host:port of a shoal-relay for links blocked both ways; "" = none */
    char relay_secret_file[PATH_MAX]; /* the secret shared with it; "" = <data-dir>/relay.secret */
    long relay_ticket_ttl_s;    /* s a relay ticket of an assignment admits its end */
};

/* Fills `cfg` from defaults, the environment and argv.  Returns 0 to run,
 * 1 if --help was printed (exit 0), or -1 with `err` set (exit 2). */
int config_load(struct config *cfg, int argc, char **argv, struct shoal_err *err);

#define CONFIG_WARNING_MAX 512    /* bytes of one warning of config_contradictions */
#define CONFIG_WARNINGS_MAX 4     /* warnings it writes at most */

/* Options that contradict each other or what the agents expect
 * (common/patience.h): a --db-timeout whose 503 comes after the agents
 * have given up, a --heartbeat-timeout that a heartbeat answered slowly
 * but in time overruns, a --max-connections that waiting long-polls can
 * fill.  One sentence each into warnings[], saying what goes wrong and
 * what to give instead; returns how many (at most CONFIG_WARNINGS_MAX).
 * None stops the server: main logs them as warnings. */
int config_contradictions(const struct config *cfg, char warnings[][CONFIG_WARNING_MAX]);

/* Prints the usage text, one line per setting with flag, variable and default. */
void config_usage(FILE *out);

#endif
