/* digests.h - the SHA-256 of dataset files, remembered by (path, size,
 * mtime) so that an agent that restarts does not hash terabytes again.
 *
 * The cache is a text file of lines "sha256 size mtime_s mtime_ns path",
 * appended to (one write a line, O_APPEND); the last line for a path wins.
 * A file whose size or mtime changed is hashed again. */
#ifndef SHOAL_AGENT_DIGESTS_H
#define SHOAL_AGENT_DIGESTS_H

#include <stddef.h>
#include <sys/stat.h>

#include "../common/err.h"
#include "../common/sha256.h"

/* The SHA-256 of `path` (stat'ed as *sb, its `len` bytes mapped at
 * `bytes`): from `cache_file` when it holds the same path, size and mtime,
 * else computed and appended there.  An empty cache_file: always computed.
 * A cache that cannot be read or written only costs the hashing (logged). */
void digest_of(const char *cache_file, const char *path, const struct stat *sb, const void *bytes, size_t len,
               char hex[SHA256_HEX]);

#endif
