/* pgembed.c - the embedded PostgreSQL cluster (see pgembed.h).
 *
 * initdb and pg_ctl run in forked children that exec them directly (never
 * through a shell), drop to the cluster's account first when we are root,
 * and append their output to <data-dir>/pg-init.log so ours stays clean.
 * The cluster's settings live in <pgdata>/shoal.conf, rewritten on every
 * start so a moved data dir still finds its socket directory. */
#include "pgembed.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "../../common/log.h"
#include "../../common/ticker.h"

#define PG_PORT "5432"
#define PG_ROLE "shoal"
#define PG_DB "shoal"
#define SOCKET_NAME "/.s.PGSQL." PG_PORT
#define LOG_TAIL 400            /* bytes of a log file quoted on failure */
#define ORPHAN_WAIT_MS 10000    /* ms to wait for a crashed cluster's backends */

/* Sets `err` to a 500 "embedded_postgres" error and returns -1. */
static int __attribute__((format(printf, 2, 3))) fail(struct shoal_err *err, const char *fmt, ...)
{
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(err, 500, "embedded_postgres", NULL, "%s", msg);
}

/* Writes "a/b" into `out`; -1 if it does not fit. */
static int path_join(char *out, size_t len, const char *a, const char *b)
{
    int n = snprintf(out, len, "%s/%s", a, b);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Copies the last bytes (up to LOG_TAIL) of file `path` into `out` as one
 * line, newlines shown as '|'; "" if unreadable. */
static void log_tail(const char *path, char *out, size_t len)
{
    size_t want = len - 1 < LOG_TAIL ? len - 1 : LOG_TAIL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    ssize_t n = size > 0 ? pread(fd, out, want, size > (off_t)want ? size - (off_t)want : 0) : 0;
    if (fd >= 0)
        close(fd);
    out[n > 0 ? n : 0] = '\0';
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = *p == '\n' ? '|' : ' ';
}

/* Fails with `what`, naming log file `path` and quoting the end of its tail
 * (the part that says what went wrong) in as much room as the message has. */
static int fail_tail(struct shoal_err *err, const char *path, const char *what)
{
    char tail[LOG_TAIL * 2];
    log_tail(path, tail, sizeof tail);
    log_error("embedded postgres: %s; %s: %s", what, path, tail);
    long room = (long)sizeof err->message - 16 - (long)(strlen(what) + strlen(path));
    size_t tl = strlen(tail);
    const char *t = room <= 0 ? "" : tl > (size_t)room ? tail + tl - room : tail;
    return fail(err, "%s; see %s: %s", what, path, t);
}

/* Writes `s` single-quoted into `out`, escaping ' as `qesc`' and \ as \\
 * (qesc '\'' for postgresql.conf, '\\' for libpq); -1 if it does not fit. */
static int quote(char *out, size_t len, const char *s, char qesc)
{
    size_t o = 0;
    if (len < 3)
        return -1;
    out[o++] = '\'';
    for (; *s; s++) {
        if (o + 4 >= len)
            return -1;
        if (*s == '\'' || *s == '\\')
            out[o++] = *s == '\'' ? qesc : '\\';
        out[o++] = *s;
    }
    out[o++] = '\'';
    out[o] = '\0';
    return 0;
}

/* Fills pg->run_as/uid/gid when we are root, since Postgres refuses root. */
static int resolve_account(struct pgembed *pg, const char *run_as, struct shoal_err *err)
{
    const char *name = run_as && run_as[0] ? run_as : "postgres";
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (geteuid() != 0)
        return 0;
    if (getpwnam_r(name, &pw, buf, sizeof buf, &res) != 0 || !res)
        return fail(err, "running as root, but account '%s' (which PostgreSQL would run as) "
                    "does not exist; create it or run shoal-server as an unprivileged user", name);
    if (pw.pw_uid == 0)
        return fail(err, "account '%s' is root, and PostgreSQL refuses to run as root; "
                    "name an unprivileged account", name);
    int n = snprintf(pg->run_as, sizeof pg->run_as, "%s", name);
    if (n < 0 || (size_t)n >= sizeof pg->run_as)
        return fail(err, "account name '%s' is too long", name);
    pg->uid = pw.pw_uid;
    pg->gid = pw.pw_gid;
    return 0;
}

/* Sets pg->bin_dir (absolute): `bin_dir` if given, else the newest
 * /usr/lib/postgresql/<N>/bin holding initdb, else initdb's dir on $PATH. */
static int find_bin_dir(struct pgembed *pg, const char *bin_dir, struct shoal_err *err)
{
    char path[PATH_MAX], dir[PATH_MAX] = "";
    if (bin_dir && bin_dir[0]) {
        if (path_join(path, sizeof path, bin_dir, "initdb") || access(path, X_OK) != 0)
            return fail(err, "no PostgreSQL initdb in %s; pass the directory that holds "
                        "initdb and pg_ctl with --pg-bin", bin_dir);
        snprintf(dir, sizeof dir, "%s", bin_dir);
    }
    long best = -1;
    DIR *d = dir[0] ? NULL : opendir("/usr/lib/postgresql");
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end;
        errno = 0;
        long v = strtol(e->d_name, &end, 10);
        if (errno || end == e->d_name || *end || v <= best)
            continue;
        snprintf(path, sizeof path, "/usr/lib/postgresql/%ld/bin/initdb", v);
        if (access(path, X_OK) == 0)
            best = v;
    }
    if (d)
        closedir(d);
    if (best >= 0)
        snprintf(dir, sizeof dir, "/usr/lib/postgresql/%ld/bin", best);
    for (const char *p = getenv("PATH"); !dir[0] && p && *p;) {
        int n = (int)strcspn(p, ":");
        int m = snprintf(path, sizeof path, "%.*s/initdb", n, p);
        if (n > 0 && m > 0 && (size_t)m < sizeof path && access(path, X_OK) == 0)
            snprintf(dir, sizeof dir, "%.*s", n, p);
        p += n + (p[n] == ':');
    }
    if (!dir[0])
        return fail(err, "PostgreSQL server binaries (initdb) not found; "
                    "install postgresql or pass --pg-bin");
    if (!realpath(dir, pg->bin_dir) || strlen(pg->bin_dir) > PATH_MAX - 16)
        return fail(err, "PostgreSQL bin dir %s: %s", dir, strerror(errno));
    return 0;
}

/* Forks; in the child, drops to the cluster's account when we are root
 * (exiting 126 if it cannot) and returns 0.  Returns the pid, or -1. */
static pid_t fork_as_account(const struct pgembed *pg)
{
    gid_t groups[64];
    int ngroups = 64;
    /* Looked up before fork: the child may only make async-signal-safe calls. */
    if (pg->run_as[0] && getgrouplist(pg->run_as, pg->gid, groups, &ngroups) < 0) {
        groups[0] = pg->gid;
        ngroups = 1;
    }
    pid_t pid = fork();
    if (pid == 0 && pg->run_as[0] &&
        (setgroups((size_t)ngroups, groups) != 0 || setgid(pg->gid) != 0 || setuid(pg->uid) != 0))
        _exit(126);
    return pid;
}

/* Waits for child `pid`; returns its exit status, or -1 if it was killed. */
static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs argv (argv[0] a full path) as the account with stdin /dev/null and
 * stdout/stderr appended to `log_path`, in a new session if `new_session`
 * (so a Ctrl-C at our terminal never reaches the postmaster).  Returns the
 * exit status (126: could not drop privileges, 127: could not exec) or -1. */
static int spawn(const struct pgembed *pg, char *const argv[], const char *log_path,
                 int new_session)
{
    /* Not close-on-exec: in < out, so the dup2s below work even when they
     * land on 0..2; close_range drops every other descriptor. */
    int in = open("/dev/null", O_RDONLY);
    int out = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid = in >= 0 && out >= 0 ? fork_as_account(pg) : -1;
    if (pid == 0) {
        static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD };
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            sigaction(sigs[i], &dfl, NULL);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 || chdir("/") != 0)
            _exit(126);
        close_range(3, ~0U, 0);
        if (new_session)
            setsid();
        execv(argv[0], argv);
        static const char msg[] = "shoal-server: cannot exec PostgreSQL binary\n";
        if (write(2, msg, sizeof msg - 1) < 0) {}
        _exit(127);
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return pid < 0 ? -1 : wait_child(pid);
}

/* Returns 1 if the account can search directory `dir` (tried for real in a
 * child running as the account), 0 if not. */
static int account_can_search(const struct pgembed *pg, const char *dir)
{
    pid_t pid = fork_as_account(pg);
    if (pid == 0)
        _exit(access(dir, X_OK) == 0 ? 0 : 1);
    return pid > 0 && wait_child(pid) == 0;
}

/* When root: makes data dir `dir` searchable by the account (it is shoal's
 * own) and checks that every parent is, naming the first one that is not. */
static int check_reachable(const struct pgembed *pg, const char *dir, struct shoal_err *err)
{
    char prefix[PATH_MAX];
    struct stat st;
    if (!pg->run_as[0])
        return 0;
    if (stat(dir, &st) != 0)
        return fail(err, "data dir %s: %s", dir, strerror(errno));
    if (!(st.st_mode & S_IXOTH) && chmod(dir, (st.st_mode & 07777) | S_IXGRP | S_IXOTH) != 0)
        return fail(err, "cannot chmod data dir %s: %s", dir, strerror(errno));
    if (account_can_search(pg, dir))
        return 0;
    for (size_t i = 1; dir[i - 1]; i++) {
        if (dir[i] != '/' && dir[i] != '\0')
            continue;
        snprintf(prefix, sizeof prefix, "%.*s", (int)i, dir);
        if (!account_can_search(pg, prefix))
            return fail(err, "PostgreSQL runs as '%s', which cannot reach %s: directory %s "
                        "is not searchable by it; run 'chmod o+x %s' or use a data dir "
                        "elsewhere", pg->run_as, dir, prefix, prefix);
    }
    return fail(err, "PostgreSQL runs as '%s', which cannot reach data dir %s",
                pg->run_as, dir);
}

/* Creates directory `path` mode 0700 owned by the account (when root); an
 * existing one is made 0700, as initdb and the postmaster insist. */
static int make_private_dir(const struct pgembed *pg, const char *path, struct shoal_err *err)
{
    struct stat st;
    int made = mkdir(path, 0700) == 0;
    if (!made && errno != EEXIST)
        return fail(err, "cannot create %s: %s", path, strerror(errno));
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return fail(err, "%s is not a directory; move it away", path);
    /* A root-owned one can only be our own, left by a crash before chown. */
    if (pg->run_as[0] && (made || st.st_uid == 0) && chown(path, pg->uid, pg->gid) != 0)
        return fail(err, "cannot chown %s to %s: %s", path, pg->run_as, strerror(errno));
    if ((st.st_mode & 07777) != 0700 && chmod(path, 0700) != 0)
        return fail(err, "cannot chmod %s to 0700: %s", path, strerror(errno));
    return 0;
}

/* Appends the include of shoal.conf to postgresql.conf unless it is there
 * (checked on every start, so a crash right after initdb is harmless). */
static int ensure_include(const struct pgembed *pg, struct shoal_err *err)
{
    static const char line[] = "include_if_exists = 'shoal.conf'";
    char path[PATH_MAX], buf[1024];
    int found = 0, rc = -1;
    FILE *f = NULL;
    if (path_join(path, sizeof path, pg->pgdata, "postgresql.conf") || !(f = fopen(path, "r+e"))) {
        fail(err, "cannot open %s/postgresql.conf: %s", pg->pgdata, strerror(errno));
        goto out;
    }
    while (fgets(buf, sizeof buf, f))
        found |= strncmp(buf, line, sizeof line - 1) == 0;
    if (!found && (fseek(f, 0, SEEK_END) != 0 ||
                   fprintf(f, "\n# Added by shoal-server.\n%s\n", line) < 0)) {
        fail(err, "cannot append to %s: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (f && fclose(f) != 0 && rc == 0)
        rc = fail(err, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* (Re)writes <pgdata>/shoal.conf: socket only, in pg->socket_dir. */
static int write_shoal_conf(const struct pgembed *pg, struct shoal_err *err)
{
    char path[PATH_MAX], dir[2 * PATH_MAX + 3];
    int rc = -1, fd = -1;
    if (quote(dir, sizeof dir, pg->socket_dir, '\'') != 0 ||
        path_join(path, sizeof path, pg->pgdata, "shoal.conf") != 0) {
        fail(err, "socket dir path %s is too long", pg->socket_dir);
        goto out;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 ||
        dprintf(fd, "# Written by shoal-server on every start; edits are overwritten.\n"
                "listen_addresses = ''\nunix_socket_directories = %s\nport = %s\n"
                "max_connections = 200\nlog_destination = 'stderr'\n", dir, PG_PORT) < 0 ||
        (pg->run_as[0] && fchown(fd, pg->uid, pg->gid) != 0)) {
        fail(err, "cannot write %s: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = fail(err, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* Returns 1 if process `pid` is a postgres whose working directory is this
 * cluster's pgdata (the postmaster and its backends chdir there), else 0. */
static int is_cluster_process(const struct pgembed *pg, long pid)
{
    char path[64], buf[PATH_MAX];
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (strcmp(buf, "postgres\n") != 0 && strcmp(buf, "postmaster\n") != 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%ld/cwd", pid);
    n = readlink(path, buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strcmp(buf, pg->pgdata) == 0;
}

/* Returns the pid of some live process of this cluster, or 0 (scans /proc). */
static long cluster_process(const struct pgembed *pg)
{
    long found = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (end != e->d_name && !*end && pid > 0 && is_cluster_process(pg, pid))
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}

/* Reads postmaster.pid: returns 1 if it names a live postmaster of this
 * cluster (to adopt), else 0 once stale pid and socket lock files are gone;
 * -1 on error.  Waits for a crashed postmaster's backends to exit first:
 * the pid file is Postgres's interlock against two sets sharing pgdata. */
static int adopt_or_clear(const struct pgembed *pg, struct shoal_err *err)
{
    char pidfile[PATH_MAX], lock[PATH_MAX], buf[32];
    long pid = 0, left = 0;
    if (path_join(pidfile, sizeof pidfile, pg->pgdata, "postmaster.pid") ||
        snprintf(lock, sizeof lock, "%s%s.lock", pg->socket_dir, SOCKET_NAME) >= (int)sizeof lock)
        return fail(err, "data dir path %s is too long", pg->pgdata);
    int fd = open(pidfile, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT)
        return fail(err, "cannot read %s: %s", pidfile, strerror(errno));
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[n > 0 ? n : 0] = '\0';
        char *end;
        errno = 0;
        pid = strtol(buf, &end, 10);
        if (!errno && end != buf && pid > 0 && is_cluster_process(pg, pid))
            return 1;
    }
    for (int ms = 0; (left = cluster_process(pg)) && ms < ORPHAN_WAIT_MS; ms += 100)
        nanosleep(&(struct timespec){ 0, 100 * 1000000L }, NULL);
    if (left)
        return fail(err, "a PostgreSQL process (pid %ld) still uses %s but no postmaster "
                    "owns it; wait for it to exit or kill it, then retry", left, pg->pgdata);
    if (fd >= 0) {
        if (unlink(pidfile) != 0 && errno != ENOENT)
            return fail(err, "cannot remove stale %s: %s", pidfile, strerror(errno));
        log_warn("embedded postgres: removed stale postmaster.pid pid=%ld pgdata=%s", pid, pg->pgdata);
    }
    if (unlink(lock) != 0 && errno != ENOENT)
        return fail(err, "cannot remove stale %s: %s", lock, strerror(errno));
    return 0;
}

/* Connects and creates database "shoal" (owned by role "shoal", the
 * bootstrap superuser) if missing. */
static int ensure_database(const struct pgembed *pg, struct shoal_err *err)
{
    const char *keys[] = { "host", "port", "dbname", "user", "connect_timeout", NULL };
    const char *vals[] = { pg->socket_dir, PG_PORT, "postgres", PG_ROLE, "10", NULL };
    const char *params[1] = { PG_DB };
    PGconn *conn = NULL;
    PGresult *res = NULL;
    int rc = -1;
    conn = PQconnectdbParams(keys, vals, 0);
    if (PQstatus(conn) != CONNECTION_OK) {
        const char *m = PQerrorMessage(conn);
        fail(err, "cannot connect to the embedded PostgreSQL: %.*s", (int)strcspn(m, "\n"), m);
        goto out;
    }
    res = PQexecParams(conn, "SELECT 1 FROM pg_database WHERE datname = $1",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 0) {
        PQclear(res);
        res = PQexecParams(conn, "CREATE DATABASE " PG_DB, 0, NULL, NULL, NULL, NULL, 0);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && strcmp(state, "42P04") == 0) { /* duplicate_database: a racing start */
            PQclear(res);
            res = PQmakeEmptyPGresult(conn, PGRES_COMMAND_OK);
        }
        if (PQresultStatus(res) == PGRES_COMMAND_OK)
            log_info("embedded postgres: created database %s", PG_DB);
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
        const char *m = PQresultErrorMessage(res);
        fail(err, "cannot check or create database %s: %.*s", PG_DB, (int)strcspn(m, "\n"), m);
        goto out;
    }
    rc = 0;
out:
    PQclear(res);
    PQfinish(conn);
    return rc;
}

/* pg_ctl start on the cluster, waiting until it accepts connections. */
static int start_postmaster(const struct pgembed *pg, struct shoal_err *err)
{
    char tool[PATH_MAX], init_log[PATH_MAX], server_log[PATH_MAX];
    struct stat st;
    /* pg-init.log sits beside pgdata, in the data dir. */
    const char *slash = strrchr(pg->pgdata, '/');
    int dl = slash ? (int)(slash - pg->pgdata) : 0;
    if (path_join(tool, sizeof tool, pg->bin_dir, "pg_ctl") ||
        path_join(server_log, sizeof server_log, pg->pgdata, "server.log") ||
        snprintf(init_log, sizeof init_log, "%.*s/pg-init.log", dl, pg->pgdata) >= (int)sizeof init_log)
        return fail(err, "data dir path %s is too long", pg->pgdata);
    off_t before = stat(server_log, &st) == 0 ? st.st_size : 0;
    char *argv[] = { tool, "-D", (char *)pg->pgdata, "-l", server_log, "-w", "-t", "60", "start", NULL };
    if (spawn(pg, argv, init_log, 1)) {
        /* The postmaster's own complaint is in server.log if it got that far. */
        int grew = stat(server_log, &st) == 0 && st.st_size > before;
        return fail_tail(err, grew ? server_log : init_log, "PostgreSQL failed to start");
    }
    log_info("embedded postgres: started pgdata=%s socket=%s", pg->pgdata, pg->socket_dir);
    return 0;
}

/* The supervisor: once every PGEMBED_WATCH_S, a postmaster that is gone
 * (killed, crashed, OOM-killed) is started again, after its orphaned
 * backends have exited (adopt_or_clear).  The pool reconnects by itself. */
static void watch(struct ticker *t, void *arg)
{
    struct pgembed *pg = arg;
    struct shoal_err e;
    (void)t;
    int running = adopt_or_clear(pg, &e), started = -1;
    if (running == 0) {
        log_warn("embedded postgres: the postmaster is gone; starting it again pgdata=%s", pg->pgdata);
        if ((started = start_postmaster(pg, &e)) == 0)
            pg->restarts++;
    }
    if (running < 0 || (running == 0 && started != 0))
        log_error("embedded postgres: cannot start it again (trying once more in %d s): %s", PGEMBED_WATCH_S,
                  e.message);
}

int pgembed_supervise(struct pgembed *pg, struct shoal_err *err)
{
    pg->watch = ticker_start("the embedded PostgreSQL's supervisor thread", PGEMBED_WATCH_S, watch, pg, err);
    return pg->watch ? 0 : -1;
}

int pgembed_start(struct pgembed *pg, const char *data_dir, const char *bin_dir,
                  const char *run_as, char *conninfo, size_t conninfo_len,
                  struct shoal_err *err)
{
    char dir[PATH_MAX], init_log[PATH_MAX], tool[PATH_MAX];
    char host[2 * PATH_MAX + 3];
    int rc = -1;
    memset(pg, 0, sizeof *pg);
    if (!data_dir || !realpath(data_dir, dir)) {
        fail(err, "data dir %s: %s; create it first", data_dir ? data_dir : "(none)", strerror(errno));
        goto out;
    }
    if (strpbrk(dir, "\n\r")) { /* would break the line in shoal.conf */
        fail(err, "data dir path %s holds a line break; use another", dir);
        goto out;
    }
    if (path_join(pg->pgdata, sizeof pg->pgdata, dir, "pg") ||
        path_join(pg->socket_dir, sizeof pg->socket_dir, dir, "pg-socket") ||
        path_join(init_log, sizeof init_log, dir, "pg-init.log")) {
        fail(err, "data dir path %s is too long", dir);
        goto out;
    }
    /* Postgres binds <socket_dir>/.s.PGSQL.5432, which must fit in sun_path. */
    size_t max = sizeof ((struct sockaddr_un *)0)->sun_path - 1;
    if (strlen(pg->socket_dir) + strlen(SOCKET_NAME) > max) {
        fail(err, "data dir %s is too long (%zu bytes) for its Unix socket path; use one of "
             "at most %zu bytes", dir, strlen(dir), max - strlen(SOCKET_NAME) - strlen("/pg-socket"));
        goto out;
    }
    if (resolve_account(pg, run_as, err) || find_bin_dir(pg, bin_dir, err) ||
        check_reachable(pg, dir, err) || make_private_dir(pg, pg->pgdata, err) ||
        make_private_dir(pg, pg->socket_dir, err))
        goto out;
    int fd = open(init_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    if (path_join(tool, sizeof tool, pg->pgdata, "PG_VERSION") == 0 && access(tool, F_OK) != 0) {
        log_info("embedded postgres: initdb pgdata=%s bin=%s", pg->pgdata, pg->bin_dir);
        char *argv[] = { tool, "-D", pg->pgdata, "-U", PG_ROLE, "--auth=trust", "-E", "UTF8",
                         "--no-locale", NULL };
        if (path_join(tool, sizeof tool, pg->bin_dir, "initdb") || spawn(pg, argv, init_log, 0)) {
            fail_tail(err, init_log, "initdb failed");
            goto out;
        }
    }
    int adopt = ensure_include(pg, err) ? -1 : adopt_or_clear(pg, err);
    if (adopt < 0 || write_shoal_conf(pg, err))
        goto out;
    pg->we_started = 1; /* from here on a failure stops it: it is ours */
    if (adopt)
        log_info("embedded postgres: adopted running postmaster pgdata=%s", pg->pgdata);
    else if (start_postmaster(pg, err) != 0)
        goto out;
    if (ensure_database(pg, err))
        goto out;
    if (!strpbrk(pg->socket_dir, " '\\"))
        snprintf(host, sizeof host, "%s", pg->socket_dir);
    else
        quote(host, sizeof host, pg->socket_dir, '\\');
    int n = snprintf(conninfo, conninfo_len, "host=%s port=%s dbname=%s user=%s",
                     host, PG_PORT, PG_DB, PG_ROLE);
    if (n < 0 || (size_t)n >= conninfo_len) {
        fail(err, "conninfo buffer too small (%d bytes needed)", n + 1);
        goto out;
    }
    rc = 0;
out:
    if (rc != 0 && pg->we_started)
        pgembed_stop(pg);
    return rc;
}

void pgembed_stop(struct pgembed *pg)
{
    char tool[PATH_MAX], log[PATH_MAX], pidfile[PATH_MAX];
    if (pg) {   /* first, so it does not start what we stop */
        ticker_stop(pg->watch);
        pg->watch = NULL;
    }
    if (!pg || !pg->we_started)
        return;
    pg->we_started = 0;
    /* pg-init.log sits beside pgdata, in the data dir. */
    const char *slash = strrchr(pg->pgdata, '/');
    int dl = slash ? (int)(slash - pg->pgdata) : 0;
    if (path_join(tool, sizeof tool, pg->bin_dir, "pg_ctl") ||
        path_join(pidfile, sizeof pidfile, pg->pgdata, "postmaster.pid") ||
        snprintf(log, sizeof log, "%.*s/pg-init.log", dl, pg->pgdata) >= (int)sizeof log)
        return;
    char *argv[] = { tool, "-D", pg->pgdata, "-m", "fast", "-w", "stop", NULL };
    int status = spawn(pg, argv, log, 0);
    if (status == 0)
        log_info("embedded postgres: stopped pgdata=%s", pg->pgdata);
    else if (access(pidfile, F_OK) != 0)
        log_info("embedded postgres: was not running pgdata=%s", pg->pgdata);
    else
        log_warn("embedded postgres: pg_ctl stop failed status=%d pgdata=%s; see %s",
                 status, pg->pgdata, log);
}
