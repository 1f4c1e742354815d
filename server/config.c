#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum opt_type { OPT_STR, OPT_LONG };

struct opt {
    const char *flag;     /* "--port" */
    const char *env;      /* "SHOAL_PORT" */
    enum opt_type type;
    size_t offset;        /* into struct config */
    size_t size;          /* OPT_STR: array size */
    long min, max;        /* OPT_LONG: inclusive bounds */
    const char *def;      /* default, as text */
    const char *help;
};

#define STR(field) OPT_STR, offsetof(struct config, field), sizeof(((struct config *)0)->field), 0, 0
#define LONG(field, lo, hi) OPT_LONG, offsetof(struct config, field), 0, lo, hi

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
    { "--threads", "SHOAL_THREADS", LONG(threads, 1, 256), "8", "HTTP worker threads" },
    { "--db-pool", "SHOAL_DB_POOL", LONG(db_pool, 1, 256), "8",
      "database connections this server keeps" },
    { "--max-body", "SHOAL_MAX_BODY", LONG(max_body, 1024, 1L << 30), "1048576",
      "largest request body accepted, bytes (larger: 413)" },
    { "--heartbeat-timeout", "SHOAL_HEARTBEAT_TIMEOUT", LONG(heartbeat_timeout, 1, 86400), "60",
      "seconds since a node's last heartbeat after which the scheduler leaves it out" },
};

#define N_OPTS (sizeof opts / sizeof opts[0])

/* Stores `text` as the value of `o`; `source` names where it came from. */
static int opt_set(struct config *cfg, const struct opt *o, const char *text,
                   const char *source, struct shoal_err *err)
{
    char *dst = (char *)cfg + o->offset;
    if (o->type == OPT_STR) {
        size_t n = strlen(text);
        if (n >= o->size)
            return err_set(err, 2, "invalid_config", o->flag, "%s: value for %s is too long (max %zu bytes)",
                           source, o->flag, o->size - 1);
        memcpy(dst, text, n + 1);
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < o->min || v > o->max)
        return err_set(err, 2, "invalid_config", o->flag, "%s: %s must be an integer from %ld to %ld, got '%s'",
                       source, o->flag, o->min, o->max, text);
    memcpy(dst, &v, sizeof v);
    return 0;
}

void config_usage(FILE *out)
{
    fprintf(out, "usage: shoal-server [options]\n\n"
                 "The shoal control plane: a REST API whose only state is PostgreSQL.\n"
                 "Every option can also be set by its environment variable; flags win.\n\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        fprintf(out, "  %s VALUE  (%s)\n      %s", opts[i].flag, opts[i].env, opts[i].help);
        if (opts[i].def[0])
            fprintf(out, " [default: %s]", opts[i].def);
        fputc('\n', out);
    }
    fprintf(out, "  --help\n      print this text and exit\n");
}

int config_load(struct config *cfg, int argc, char **argv, struct shoal_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_OPTS; i++) {
        if (opt_set(cfg, &opts[i], opts[i].def, "default", err) != 0)
            return -1;
        const char *env = getenv(opts[i].env);
        if (env && opt_set(cfg, &opts[i], env, opts[i].env, err) != 0)
            return -1;
    }
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            config_usage(stdout);
            return 1;
        }
        const char *arg = argv[a];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt *o = NULL;
        for (size_t i = 0; i < N_OPTS; i++) {
            if (strlen(opts[i].flag) == name_len && strncmp(opts[i].flag, arg, name_len) == 0)
                o = &opts[i];
        }
        if (!o)
            return err_set(err, 2, "invalid_config", arg, "unknown option '%s'; see --help", arg);
        const char *value = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!value)
            return err_set(err, 2, "invalid_config", o->flag, "%s needs a value", o->flag);
        if (opt_set(cfg, o, value, "command line", err) != 0)
            return -1;
    }
    return 0;
}
