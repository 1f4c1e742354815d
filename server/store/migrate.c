#include "migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/log.h"
#include "db.h"
#include "embedded.h"

/* Arbitrary but fixed: the advisory lock id all shoal servers agree on. */
#define MIGRATE_LOCK_ID "7489301"

/* The version is the file name's leading number: "001_init.sql" -> 1. */
static long migration_version(const char *name)
{
    char *end;
    errno = 0;
    long v = strtol(name, &end, 10);
    if (errno || end == name || *end != '_' || v <= 0)
        return -1;
    return v;
}

/* Runs one statement without parameters; used for BEGIN/COMMIT and locks. */
static int migrate_run(PGconn *c, const char *sql, struct shoal_err *err)
{
    PGresult *r = db_exec_within(c, sql, 0, NULL, 0, err);
    if (!r)
        return -1;
    PQclear(r);
    return 0;
}

/* Applies one migration file unless it is already recorded.  The file holds
 * several statements, so it goes through PQexec: it has no parameters and
 * comes from the binary, never from input. */
static int migrate_one(PGconn *c, const struct embedded_file *f, long version,
                       int *applied, struct shoal_err *err)
{
    char vtext[24];
    snprintf(vtext, sizeof vtext, "%ld", version);
    const char *params[2] = { vtext, f->name };
    int rc = -1;
    PGresult *r = NULL;

    if (migrate_run(c, "BEGIN", err) != 0)
        return -1;
    r = db_exec(c, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, params, err);
    if (!r)
        goto out;
    if (PQntuples(r) > 0) {
        rc = 0;
        goto out;
    }
    PQclear(r);
    /* A migration file is many statements and takes no input: PQexec, as
     * PQexecParams runs only one statement. */
    r = PQexec(c, f->data);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        err_set(err, 500, "migration_failed", NULL, "migration %s failed: %s", f->name,
                PQresultErrorMessage(r));
        goto out;
    }
    PQclear(r);
    r = db_exec(c, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, params, err);
    if (!r)
        goto out;
    log_info("migration applied version=%ld name=%s", version, f->name);
    (*applied)++;
    rc = 0;
out:
    PQclear(r);
    if (migrate_run(c, rc == 0 ? "COMMIT" : "ROLLBACK", rc == 0 ? err : NULL) != 0)
        rc = -1;
    return rc;
}

int migrate_apply(PGconn *c, int *applied, struct shoal_err *err)
{
    int rc = -1, locked = 0;
    *applied = 0;
    /* Waiting for another server's migrations, and a migration itself, may
     * take longer than --db-timeout. */
    if (migrate_run(c, "SET statement_timeout = 0", err) != 0)
        return -1;
    if (migrate_run(c, "SELECT pg_advisory_lock(" MIGRATE_LOCK_ID ")", err) != 0)
        goto out;
    locked = 1;
    if (migrate_run(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                       " version integer PRIMARY KEY,"
                       " name text NOT NULL,"
                       " applied_at timestamptz NOT NULL DEFAULT now())", err) != 0)
        goto out;
    for (size_t i = 0; i < embedded_migrations_count; i++) {
        const struct embedded_file *f = &embedded_migrations[i];
        long version = migration_version(f->name);
        if (version < 0) {
            err_set(err, 500, "migration_failed", NULL,
                    "migration file %s must be named NNN_description.sql", f->name);
            goto out;
        }
        if (migrate_one(c, f, version, applied, err) != 0)
            goto out;
    }
    rc = 0;
out:
    if (locked)
        migrate_run(c, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_ID ")", NULL);
    migrate_run(c, "RESET statement_timeout", NULL);
    return rc;
}

int migrate_is_current(PGconn *c, struct shoal_err *err)
{
    PGresult *r = db_exec(c, "SELECT count(*) FROM schema_migrations", 0, NULL, err);
    if (!r)
        return -1;
    long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n >= (long)embedded_migrations_count;
}
