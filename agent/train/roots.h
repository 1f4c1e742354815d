/* roots.h - the directories a job may read data from, and every path a
 * job names opened beneath one of them.
 *
 * A site that lends a machine bounds what a job (the server's admin, or
 * whoever can create jobs there) can make its agent read: the owner names
 * data roots (shoal-agent --data-roots, default <data-dir>/datasets), and
 * every path a job names (data.path, validation.path, a manifest, its
 * shards, a directory's files, a glob's matches) is opened beneath one of
 * them, or not at all.  "Beneath" is what the kernel resolves, not the
 * text: openat2(2) with RESOLVE_BENEATH from the root's directory, so
 * "..", a symlink (absolute, or relative and climbing out) or a directory
 * renamed while the path is walked cannot lead out.  Where the kernel has
 * no openat2 (Linux before 5.6) the path is opened and the file opened is
 * checked instead: /proc/self/fd names where it really is.  Whatever the
 * roots, the agent's identity file (<data-dir>/node.json, its node token)
 * is never read for a job. */
#ifndef SHOAL_AGENT_ROOTS_H
#define SHOAL_AGENT_ROOTS_H

#include <dirent.h>
#include <limits.h>
#include <sys/types.h>

#include "../../common/err.h"

#define ROOTS_MAX 16
#define ROOTS_FLAG "--data-roots"   /* named in every refusal */

struct data_root {
    char path[PATH_MAX];        /* as the owner wrote it, without a trailing '/' */
    char real[PATH_MAX];        /* canonical (realpath) */
    int fd;                     /* O_PATH | O_DIRECTORY */
};

struct data_roots {
    int n;
    struct data_root root[ROOTS_MAX];
    char id_file[PATH_MAX];     /* <data-dir>/node.json: never read for a job */
    int no_openat2;             /* 1: the /proc check instead (no openat2 here, or a test) */
};

/* Opens the roots in `list` (directories separated by ':'; "" means
 * <data_dir>/datasets, created if missing) for an agent whose data
 * directory is data_dir.  Each must be an absolute path to an existing
 * directory.  Returns 0, or -1 with err naming the root and what is wrong
 * (status 2: a start-up error).  roots_free releases what it opened. */
int roots_init(struct data_roots *r, const char *list, const char *data_dir, struct shoal_err *err);

void roots_free(struct data_roots *r);

/* The roots as the registration and --help show them: "a:b" into out. */
void roots_text(const struct data_roots *r, char *out, size_t len);

/* Opens `path` (absolute; what a job named) read-only beneath the root it
 * names, with O_CLOEXEC | extra flags (O_DIRECTORY for a directory).
 * Returns the fd, or -1 with err: 422 "path_refused" on `field` when it is
 * not beneath a root (the message names the path, the roots and the
 * flag), when it climbs or links out of one, or when it is the agent's
 * identity; 422 "invalid_dataset" when it does not exist or cannot be
 * read (ENOENT, EACCES, ...); 503 "dataset_io" for errors that may pass. */
int roots_open(const struct data_roots *r, const char *path, int extra_flags, const char *field,
               struct shoal_err *err);

/* roots_open of a directory, as a DIR (closedir releases it); NULL with err. */
DIR *roots_opendir(const struct data_roots *r, const char *path, const char *field, struct shoal_err *err);

/* The files a glob names (`pattern` absolute, its wildcards * ? [...] in
 * any component below the root; no ".." component), found by reading the
 * directories beneath its root (never glob(3), which would list any
 * directory): each match, in byte order of the whole path, passed to
 * each(arg, path) until one returns non-zero.  Returns 0 (matches may be
 * none: *n_found says how many), the callback's non-zero, or -1 with err. */
int roots_glob(const struct data_roots *r, const char *pattern, const char *field, int *n_found,
               int (*each)(void *arg, const char *path), void *arg, struct shoal_err *err);

#endif
