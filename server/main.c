/* main.c - shoal-server: configuration, start-up order, and clean shutdown.
 *
 * Start: settings -> data dir -> tokens (and the relay's secret) -> database (embedded or given) ->
 * migrations -> assignment listener -> recovery and reachability threads -> HTTP.  Stop on SIGINT/SIGTERM in the
 * reverse order (waiting long-polls answered first), so the embedded
 * Postgres is shut down cleanly after the last request. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/dirlock.h"
#include "../common/log.h"
#include "http/auth.h"
#include "http/http.h"
#include "jobs/longpoll.h"
#include "store/migrate.h"
#include "store/pgembed.h"
#include "jobs/reach.h"
#include "jobs/relay_check.h"
#include "jobs/recovery.h"
#include "api/routes.h"
#include "store/db.h"
#include "http/metrics.h"

/* Creates `dir` and its missing parents, mode 0700 for what it creates. */
static int make_dirs(const char *dir, struct shoal_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return err_set(err, 2, "data_dir", "data_dir", "cannot create %s: %s", path, strerror(errno));
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* Writes the bound port to <data-dir>/server.port via a rename, so a reader
 * never sees half a number. */
static void write_port_file(const char *data_dir, unsigned port)
{
    char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/server.port", data_dir);
    snprintf(tmp, sizeof tmp, "%s/server.port.tmp", data_dir);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%u\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        log_warn("cannot write %s: %s", path, strerror(errno));
}

/* Applies migrations, retrying for a while when the database is not up yet
 * (a compose file may start Postgres and shoal together). */
static int run_migrations(struct db_pool *db, struct shoal_err *err)
{
    for (int attempt = 1; ; attempt++) {
        PGconn *c = db_acquire(db, err);
        int applied = 0, rc = -1;
        if (c) {
            rc = migrate_apply(c, &applied, err);
            db_release(db, c);
        }
        if (rc == 0) {
            log_info("migrations current applied_now=%d", applied);
            return 0;
        }
        if (err->status != 503 || attempt == 30)
            return -1;
        log_warn("database not reachable yet, retrying attempt=%d", attempt);
        sleep(1);
    }
}

int main(int argc, char **argv)
{
    struct server srv;
    struct shoal_err err;
    struct pgembed pg = { 0 };
    struct MHD_Daemon *httpd = NULL;
    struct recovery *recovery = NULL;
    char conninfo[PATH_MAX + 128];
    int rc = 1, dir_lock = -1;
    sigset_t stop_signals;

    memset(&srv, 0, sizeof srv);
    srv.routes = routes;
    srv.routes_count = routes_count;
    srv.upload_sink = routes_upload_sink;
    int cr = config_load(&srv.cfg, argc, argv, &err);
    if (cr != 0) {
        if (cr < 0)
            fprintf(stderr, "shoal-server: %s\n", err.message);
        return cr > 0 ? 0 : 2;
    }
    enum log_level lvl;
    if (log_parse_level(srv.cfg.log_level, &lvl) != 0) {
        fprintf(stderr, "shoal-server: --log-level must be debug, info, warn or error\n");
        return 2;
    }
    log_threshold = lvl;
    char contradictions[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX];
    for (int i = 0, n = config_contradictions(&srv.cfg, contradictions); i < n; i++)
        log_warn("options contradict: %s", contradictions[i]);

    /* Block the stop signals before any thread exists; main waits for them. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* one server per data directory: a second would take over the first's
     * embedded database and tokens */
    if (make_dirs(srv.cfg.data_dir, &err) != 0 ||
        (dir_lock = dirlock_take(srv.cfg.data_dir, "server.lock", "shoal-server", "--data-dir", &err)) < 0 ||
        make_dirs(srv.cfg.checkpoint_dir, &err) != 0 || auth_load_tokens(&srv, &err) != 0 ||
        auth_load_relay_secret(&srv, &err) != 0 ||
        tls_load(srv.cfg.tls_cert, srv.cfg.tls_key, &srv.tls, &err) != 0)
        goto fail;
    srv.metrics = metrics_new(routes_count);
    if (!srv.metrics) {
        err_set(&err, 1, "oom", NULL, "out of memory");
        goto fail;
    }
    if (srv.cfg.database_url[0]) {
        snprintf(conninfo, sizeof conninfo, "%s", srv.cfg.database_url);
    } else {
        log_info("starting embedded postgres data_dir=%s/pg", srv.cfg.data_dir);
        if (pgembed_start(&pg, srv.cfg.data_dir, srv.cfg.pg_bin, srv.cfg.pg_user, conninfo,
                          sizeof conninfo, &err) != 0 || pgembed_supervise(&pg, &err) != 0)
            goto fail;
    }
    srv.db = db_pool_new(conninfo, (int)srv.cfg.db_pool, srv.cfg.db_timeout_s * 1000);
    if (!srv.db) {
        err_set(&err, 1, "oom", NULL, "out of memory");
        goto fail;
    }
    if (run_migrations(srv.db, &err) != 0)
        goto fail;
    /* a relay that does not answer is said now, not at a job's first dial */
    if (srv.cfg.relay[0] && !(srv.relay = relay_check_new(srv.cfg.relay))) {
        err_set(&err, 1, "oom", NULL, "out of memory");
        goto fail;
    }
    relay_check_now(srv.relay);
    srv.longpoll = longpoll_start(conninfo, srv.cfg.max_long_polls,
                                  &(struct assignment_tickets){ .secret = srv.relay_secret,
                                                                .ttl_s = srv.cfg.relay_ticket_ttl_s },
                                  &err);
    if (!srv.longpoll)
        goto fail;
    recovery = recovery_start(&srv, &err);
    if (!recovery)
        goto fail;
    srv.recovery = recovery;
    srv.reach = reach_start(&srv, &err);
    if (!srv.reach)
        goto fail;
    unsigned port = 0;
    auth_limit_init(srv.cfg.auth_failures, srv.cfg.auth_failure_window_s);
    auth_register_init(srv.cfg.max_registrations);
    if (auth_addr_load(&srv, &err) != 0)   /* the fleet is then known as it is heard from */
        log_warn("cannot read the registered nodes' addresses: %s", err.message);
    httpd = http_start(&srv, &port, &err);
    if (!httpd)
        goto fail;
    write_port_file(srv.cfg.data_dir, port);
    log_info("listening addr=%s port=%u scheme=%s database=%s", srv.cfg.listen_addr, port,
             srv.tls.cert_pem ? "https" : "http", srv.cfg.database_url[0] ? "external" : "embedded");

    int sig = 0;
    sigwait(&stop_signals, &sig);
    log_info("stopping signal=%d", sig);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "shoal-server: %s\n", err.message);
    log_error("start-up failed: %s", err.message);
out:
    http_lanes_stop(&srv);              /* what waits for a worker: 503; what runs: finishes */
    http_wait_deferred(&srv, 150000);   /* a search runs at most 120 s */
    longpoll_stop(srv.longpoll);        /* resumes every waiting long-poll: MHD must find none suspended */
    http_wait_suspended(&srv, 3000);    /* and lets their answers go out */
    http_stop(httpd);
    tls_free(&srv.tls);
    reach_stop(srv.reach);
    relay_check_free(srv.relay);
    recovery_stop(recovery);
    longpoll_free(srv.longpoll);
    db_pool_close(srv.db);
    pgembed_stop(&pg);
    metrics_free(srv.metrics);
    if (dir_lock >= 0)
        close(dir_lock);
    return rc;
}
