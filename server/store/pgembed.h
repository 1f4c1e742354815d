/* pgembed.h - the embedded PostgreSQL: a private cluster under the data dir.
 *
 * With no database URL, shoal-server runs its own PostgreSQL 15 cluster in
 * <data-dir>/pg, listening only on a Unix socket in <data-dir>/pg-socket (no
 * TCP port).  It is created with initdb on first use, started with pg_ctl
 * and stopped on shutdown.  Postgres refuses to run as root, so when shoal
 * runs as root every initdb/pg_ctl runs as an unprivileged account
 * (default "postgres") and the cluster's directories belong to it.
 */
#ifndef SHOAL_PGEMBED_H
#define SHOAL_PGEMBED_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "../../common/err.h"

struct ticker;

struct pgembed {
    char pgdata[PATH_MAX];      /* <data-dir>/pg */
    char socket_dir[PATH_MAX];  /* <data-dir>/pg-socket */
    char bin_dir[PATH_MAX];     /* directory holding initdb, pg_ctl, postgres */
    char run_as[64];            /* account Postgres runs as when we are root, "" otherwise */
    uid_t uid;                  /* that account's ids (only used when run_as[0]) */
    gid_t gid;
    int we_started;             /* 1 if pgembed_start started the postmaster */
    struct ticker *watch;       /* the supervisor (pgembed_supervise); NULL: none */
    int restarts;               /* postmasters it started again; its thread's only */
};

#define PGEMBED_WATCH_S 1       /* s between the supervisor's looks at the postmaster */

/* Creates (first run) and starts the cluster for `data_dir`, which must exist.
 * `bin_dir` may be NULL or "" to look in /usr/lib/postgresql/<newest>/bin,
 * then $PATH.  `run_as` names the account to use when running as root (NULL
 * or "" means "postgres").  A stale postmaster.pid left by a crash is
 * removed; a postmaster that is still running on this cluster is adopted.
 * Ensures a database "shoal" owned by role "shoal" exists, and writes a libpq
 * conninfo string for it into `conninfo`.  Returns 0, or -1 with `err` set to
 * a message that says what to do (status 500, code "embedded_postgres"). */
int pgembed_start(struct pgembed *pg, const char *data_dir, const char *bin_dir,
                  const char *run_as, char *conninfo, size_t conninfo_len,
                  struct shoal_err *err);

/* Starts the supervisor: a thread that starts the postmaster again when it
 * is gone (killed, crashed), once every PGEMBED_WATCH_S.  Call after
 * pgembed_start succeeded.  Returns 0, or -1 with `err` set. */
int pgembed_supervise(struct pgembed *pg, struct shoal_err *err);

/* Stops the supervisor, then the postmaster (fast shutdown) if
 * pgembed_start started or adopted it; waits for it to exit.  Safe to call
 * twice. */
void pgembed_stop(struct pgembed *pg);

#endif
