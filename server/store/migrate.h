/* migrate.h - applies the numbered SQL files in sql/ at start-up.
 *
 * Each migration runs in its own transaction and is recorded in
 * schema_migrations (version, name, applied_at); one that is recorded is
 * never run again.  A session advisory lock makes servers that start at the
 * same time on one database take turns. */
#ifndef SHOAL_MIGRATE_H
#define SHOAL_MIGRATE_H

#include <libpq-fe.h>

#include "../../common/err.h"

/* Applies every embedded migration not yet recorded, in order.  Writes the
 * number applied now into `applied`.  Returns 0, or -1 with `err` set (the
 * failing migration is rolled back and named). */
int migrate_apply(PGconn *c, int *applied, struct shoal_err *err);

/* 1 if every embedded migration is recorded in the database, 0 if not, or
 * -1 with `err` set if the database cannot be asked. */
int migrate_is_current(PGconn *c, struct shoal_err *err);

#endif
