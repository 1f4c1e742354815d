/* roots.c - a job's paths opened beneath the site owner's data roots
 * (roots.h). */
#include "roots.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ROOTS_GLOB_MAX 100000   /* matches of one pattern (data.h's DATA_SHARDS_MAX) */
#define ROOTS_DEFAULT "datasets"  /* under the data directory */
#define ROOTS_ID_FILE "node.json" /* under the data directory: the node token */

static int sys_openat2(int dirfd, const char *path, int flags)
{
    struct open_how how = { .flags = (unsigned long long)flags,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Drops a trailing '/' (not of "/" itself). */
static void trim_slash(char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
}

/* One root from its text (len bytes at s). */
static int root_add(struct data_roots *r, const char *s, size_t len, struct shoal_err *err)
{
    if (r->n == ROOTS_MAX)
        return err_set(err, 2, "invalid_config", ROOTS_FLAG, "%s names more than %d directories", ROOTS_FLAG,
                       ROOTS_MAX);
    struct data_root *d = &r->root[r->n];
    if (len == 0 || len >= sizeof d->path || s[0] != '/')
        return err_set(err, 2, "invalid_config", ROOTS_FLAG, "%s: '%.*s' is not an absolute directory path",
                       ROOTS_FLAG, (int)(len > 200 ? 200 : len), s);
    memcpy(d->path, s, len);
    d->path[len] = '\0';
    trim_slash(d->path);
    if (!realpath(d->path, d->real))
        return err_set(err, 2, "invalid_config", ROOTS_FLAG, "%s: cannot use '%s': %s", ROOTS_FLAG, d->path,
                       strerror(errno));
    d->fd = open(d->real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d->fd < 0)
        return err_set(err, 2, "invalid_config", ROOTS_FLAG, "%s: '%s' is not a directory this agent can open: %s",
                       ROOTS_FLAG, d->path, strerror(errno));
    r->n++;
    return 0;
}

int roots_init(struct data_roots *r, const char *list, const char *data_dir, struct shoal_err *err)
{
    char dflt[PATH_MAX];
    memset(r, 0, sizeof *r);
    if ((size_t)snprintf(r->id_file, sizeof r->id_file, "%s/%s", data_dir, ROOTS_ID_FILE) >= sizeof r->id_file)
        return err_set(err, 2, "invalid_config", "--data-dir", "--data-dir is too long");
    if (!list[0]) {
        if ((size_t)snprintf(dflt, sizeof dflt, "%s/%s", data_dir, ROOTS_DEFAULT) >= sizeof dflt)
            return err_set(err, 2, "invalid_config", "--data-dir", "--data-dir is too long");
        if (mkdir(dflt, 0755) != 0 && errno != EEXIST)
            return err_set(err, 2, "invalid_config", ROOTS_FLAG, "cannot create the default data root '%s': %s",
                           dflt, strerror(errno));
        list = dflt;
    }
    for (const char *s = list; *s;) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        if (len > 0 && root_add(r, s, len, err) != 0) {
            roots_free(r);
            return -1;
        }
        s += len + (colon ? 1 : 0);
    }
    if (r->n == 0)
        return err_set(err, 2, "invalid_config", ROOTS_FLAG, "%s names no directory", ROOTS_FLAG);
    int probe = sys_openat2(r->root[0].fd, ".", O_PATH | O_CLOEXEC);
    if (probe >= 0)
        close(probe);
    else if (errno == ENOSYS)
        r->no_openat2 = 1;
    return 0;
}

void roots_free(struct data_roots *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->root[i].fd >= 0)
            close(r->root[i].fd);
    r->n = 0;
}

void roots_text(const struct data_roots *r, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < r->n && at < len; i++) {
        int w = snprintf(out + at, len - at, "%s%s", i ? ":" : "", r->root[i].path);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* path without "//" and "/./" (".." is left to the kernel), into out. */
static int normalise(const char *path, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = path; *p;) {
        if (p[0] == '/' && (p[1] == '/' || (p[1] == '.' && (p[2] == '/' || p[2] == '\0')))) {
            p += p[1] == '/' ? 1 : 2;
            continue;
        }
        if (o + 1 >= len)
            return -1;
        out[o++] = *p++;
    }
    out[o] = '\0';
    if (o == 0)
        snprintf(out, len, "/");
    trim_slash(out);
    return 0;
}

/* The root `path` lies beneath as text (owner's spelling or canonical),
 * and the rest of the path after it ("." for the root itself). */
static const struct data_root *root_of(const struct data_roots *r, const char *path, const char **rest)
{
    for (int i = 0; i < r->n; i++) {
        const char *spell[2] = { r->root[i].path, r->root[i].real };
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(spell[k]);
            if (n == 1 && spell[k][0] == '/') {   /* "/": everything */
                *rest = path[1] ? path + 1 : ".";
                return &r->root[i];
            }
            if (strncmp(path, spell[k], n) == 0 && (path[n] == '/' || path[n] == '\0')) {
                *rest = path[n] ? path + n + 1 : ".";
                return &r->root[i];
            }
        }
    }
    return NULL;
}

static int refused(const struct data_roots *r, const char *field, const char *path, const char *why,
                   struct shoal_err *err)
{
    char roots[512];
    roots_text(r, roots, sizeof roots);
    return err_set(err, 422, "path_refused", field, "%s '%.200s' %s; this agent reads a job's data only beneath "
                   "its data roots (%.100s): its owner sets them with %s (SHOAL_DATA_ROOTS)", field, path, why,
                   roots, ROOTS_FLAG);
}

/* Without openat2: fd (opened by path) must really be beneath d. */
static int really_beneath(const struct data_root *d, int fd)
{
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof real - 1);
    if (n <= 0)
        return 0;
    real[n] = '\0';
    size_t len = strlen(d->real);
    return (len == 1 && d->real[0] == '/') ||
           (strncmp(real, d->real, len) == 0 && (real[len] == '/' || real[len] == '\0'));
}

int roots_open(const struct data_roots *r, const char *path, int extra_flags, const char *field,
               struct shoal_err *err)
{
    char norm[PATH_MAX];
    const char *rest = NULL;
    struct stat sb, id;
    if (path[0] != '/' || normalise(path, norm, sizeof norm) != 0)
        return refused(r, field, path, "is not an absolute path of at most PATH_MAX bytes", err);
    const struct data_root *d = root_of(r, norm, &rest);
    if (!d)
        return refused(r, field, path, "is not beneath any of them", err);
    /* O_NONBLOCK: a FIFO must not block the open; O_PATH takes no other flags */
    int flags = extra_flags & O_PATH ? O_PATH | O_CLOEXEC | (extra_flags & O_DIRECTORY)
                                     : O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | extra_flags;
    int fd = r->no_openat2 ? openat(d->fd, rest, flags) : sys_openat2(d->fd, rest, flags);
    if (fd < 0) {
        int why = errno;
        if (why == EXDEV)
            return refused(r, field, path, "leads out of its data root (through '..' or a symbolic link)", err);
        if (why == ENOENT || why == ENOTDIR || why == EACCES || why == ELOOP || why == ENAMETOOLONG ||
            why == EISDIR)
            return err_set(err, 422, "invalid_dataset", field, "dataset '%s': %s", path, strerror(why));
        return err_set(err, 503, "dataset_io", field, "dataset '%s': %s", path, strerror(why));
    }
    if (r->no_openat2 && !really_beneath(d, fd)) {
        close(fd);
        return refused(r, field, path, "leads out of its data root (through '..' or a symbolic link)", err);
    }
    if (fstat(fd, &sb) == 0 && stat(r->id_file, &id) == 0 && sb.st_dev == id.st_dev && sb.st_ino == id.st_ino) {
        close(fd);
        return refused(r, field, path, "is this agent's identity file (its node token)", err);
    }
    return fd;
}

DIR *roots_opendir(const struct data_roots *r, const char *path, const char *field, struct shoal_err *err)
{
    int fd = roots_open(r, path, O_DIRECTORY, field, err);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d) {
        err_set(err, 503, "dataset_io", field, "dataset '%s': %s", path, strerror(errno));
        close(fd);
    }
    return d;
}

/* ---- globs ------------------------------------------------------------- */

struct glob_walk {
    const struct data_roots *r;
    const char *field;
    char **found;
    size_t n, cap;
    struct shoal_err *err;
};

static int has_wildcard(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == '*' || s[i] == '?' || s[i] == '[')
            return 1;
    return 0;
}

static int found_add(struct glob_walk *g, const char *path)
{
    if (g->n == ROOTS_GLOB_MAX)
        return err_set(g->err, 422, "invalid_dataset", g->field, "the pattern matches more than %d files",
                       ROOTS_GLOB_MAX);
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        char **more = realloc(g->found, cap * sizeof *more);
        if (!more)
            return err_set(g->err, 500, "internal", NULL, "out of memory");
        g->found = more;
        g->cap = cap;
    }
    if (!(g->found[g->n] = strdup(path)))
        return err_set(g->err, 500, "internal", NULL, "out of memory");
    g->n++;
    return 0;
}

/* Matches the components of `rest` below directory `dir` (a path beneath
 * a root, as the pattern spells it). */
static int walk(struct glob_walk *g, const char *dir, const char *rest)
{
    const char *slash = strchr(rest, '/');
    size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
    char path[PATH_MAX], comp[NAME_MAX + 1];
    int rc = 0;
    if (len > NAME_MAX)
        return err_set(g->err, 422, "invalid_dataset", g->field, "a name in the pattern is too long");
    memcpy(comp, rest, len);
    comp[len] = '\0';
    if (!has_wildcard(comp, len)) {   /* one name: the path goes on, or ends here if it exists */
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, comp) >= sizeof path)
            return err_set(g->err, 422, "invalid_dataset", g->field, "the pattern is too long");
        if (slash)
            return walk(g, path, slash + 1);
        struct shoal_err quiet;
        int fd = roots_open(g->r, path, O_PATH, g->field, &quiet);
        if (fd >= 0)
            close(fd);
        return fd >= 0 ? found_add(g, path) : 0;
    }
    struct shoal_err opened;
    DIR *d = roots_opendir(g->r, dir, g->field, &opened);
    if (!d) {   /* a candidate that is no directory (or is gone) matches nothing */
        if (strcmp(opened.code, "invalid_dataset") == 0)
            return 0;
        *g->err = opened;
        return -1;
    }
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || fnmatch(comp, e->d_name, FNM_PERIOD))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        rc = slash ? walk(g, path, slash + 1) : found_add(g, path);
    }
    closedir(d);
    return rc;
}

static int by_bytes(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int roots_glob(const struct data_roots *r, const char *pattern, const char *field, int *n_found,
               int (*each)(void *arg, const char *path), void *arg, struct shoal_err *err)
{
    char norm[PATH_MAX], dir[PATH_MAX];
    const char *rest = NULL;
    struct glob_walk g = { .r = r, .field = field, .err = err };
    int rc = -1;
    *n_found = 0;
    if (pattern[0] != '/' || normalise(pattern, norm, sizeof norm) != 0)
        return refused(r, field, pattern, "is not an absolute path of at most PATH_MAX bytes", err);
    if (strstr(norm, "/../") || (strlen(norm) >= 3 && strcmp(norm + strlen(norm) - 3, "/..") == 0))
        return refused(r, field, pattern, "climbs with '..' (a pattern may not)", err);
    if (!root_of(r, norm, &rest))
        return refused(r, field, pattern, "is not beneath any of them", err);
    if (strcmp(rest, ".") != 0) {   /* rest points into norm, past the root and its '/' */
        snprintf(dir, sizeof dir, "%.*s", (int)(rest - norm - 1), norm);
        if (walk(&g, dir, rest) != 0)
            goto out;
    }
    if (g.n)
        qsort(g.found, g.n, sizeof *g.found, by_bytes);
    *n_found = (int)g.n;
    rc = 0;
    for (size_t i = 0; i < g.n && rc == 0; i++)
        rc = each(arg, g.found[i]);
out:
    for (size_t i = 0; i < g.n; i++)
        free(g.found[i]);
    free(g.found);
    return rc;
}
