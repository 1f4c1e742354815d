/* digests.h - the SHA-256 of dataset files, remembered by (path, size,
 * mtime) so that an agent that restarts does not hash terabytes again.
 *
 * The cache is a text file of lines "sha256 size mtime_s mtime_ns path",
 * read once into memory when first asked and appended to (one write a
 * line, O_APPEND); the last line for a path wins.  A file whose size or
 * mtime changed is hashed again. */
#ifndef SHOAL_AGENT_DIGESTS_H
#define SHOAL_AGENT_DIGESTS_H

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>

#include "../../common/err.h"
#include "../../common/sha256.h"

struct digest_entry;

struct digest_cache {
    char file[PATH_MAX];        /* "": no cache, every digest computed */
    int loaded;
    struct digest_entry *slots; /* open addressing by the path's hash */
    size_t n, cap;
};

/* The SHA-256 of `path` (stat'ed as *sb, its `len` bytes mapped at
 * `bytes`): from the cache when it holds the same path, size and mtime,
 * else computed and remembered (in memory and in the file).  A cache file
 * that cannot be read or written only costs the hashing (logged). */
void digest_of(struct digest_cache *c, const char *path, const struct stat *sb, const void *bytes, size_t len,
               char hex[SHA256_HEX]);

/* Releases what the cache holds in memory and empties it. */
void digest_cache_free(struct digest_cache *c);

#endif
